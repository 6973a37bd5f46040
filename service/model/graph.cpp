// The fused ops (registered as TorchScript operators numaserve::*) and the
// passes that put them into a frozen forward graph. See graph.h.
#include "model/graph.h"

#include <ATen/Parallel.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kernels/kernels.h"
#include "model/model.h"
#include "model/triangle.h"

namespace numaserve::model {
namespace {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = c10::aten;
namespace prim = c10::prim;

// The kernels' path: the CPU's best, unless the benchmark narrowed it.
std::atomic<kernels::Isa> isa{kernels::best_isa()};
std::atomic<bool> bag_reuse{true};  // set_bag_reuse()

// Rows per task when an op's rows are split over the intra-op threads: a
// row of either kernel is well under a microsecond, so smaller tasks would
// cost more to hand out than they save.
constexpr std::int64_t kGrain = 32;

// ---- The ops.

bool is_long_vector(const at::Tensor& t) { return t.scalar_type() == at::kLong && t.dim() == 1; }

// out[n, p] = <v[n, rows[p]], v[n, cols[p]]>, rows and cols already in [0, F).
at::Tensor run_dot_pairs(const at::Tensor& vectors, std::vector<std::int64_t> rows, std::vector<std::int64_t> cols) {
  const at::Tensor v = vectors.contiguous();
  const auto n = v.size(0), pairs = static_cast<std::int64_t>(rows.size());
  at::Tensor out = at::empty({n, pairs}, v.options());
  const kernels::DotPairs job{v.data_ptr<float>(), v.size(1), v.size(2), rows.data(), cols.data(), pairs, out.data_ptr<float>()};
  at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) { kernels::dot_pairs(isa.load(std::memory_order_relaxed), job, begin, end); });
  return out;
}

bool kernel_takes(const at::Tensor& vectors) { return vectors.scalar_type() == at::kFloat && vectors.dim() == 3; }

// bmm(v, v^T)[:, rows, cols]
at::Tensor dot_interaction(const at::Tensor& vectors, const at::Tensor& rows, const at::Tensor& cols) {
  auto original = [&] {
    return at::index(at::bmm(vectors, vectors.transpose(1, 2)), c10::List<c10::optional<at::Tensor>>({c10::nullopt, rows, cols}));
  };
  if (!kernel_takes(vectors) || !is_long_vector(rows) || !is_long_vector(cols) || rows.numel() != cols.numel()) return original();
  const auto f = vectors.size(1);
  const at::Tensor rc = rows.contiguous(), cc = cols.contiguous();
  std::vector<std::int64_t> r(rc.data_ptr<std::int64_t>(), rc.data_ptr<std::int64_t>() + rc.numel());
  std::vector<std::int64_t> c(cc.data_ptr<std::int64_t>(), cc.data_ptr<std::int64_t>() + cc.numel());
  for (auto* index : {&r, &c}) {
    for (auto& i : *index) {
      if (i < -f || i >= f) return original();  // ATen's error
      if (i < 0) i += f;
    }
  }
  return run_dot_pairs(vectors, std::move(r), std::move(c));
}

// bmm(v, v^T).flatten(1).index_select(1, pairs): pair p is row p / F, column p % F.
at::Tensor dot_interaction_flat(const at::Tensor& vectors, const at::Tensor& pairs) {
  auto original = [&] { return at::bmm(vectors, vectors.transpose(1, 2)).flatten(1).index_select(1, pairs); };
  if (!kernel_takes(vectors) || !is_long_vector(pairs)) return original();
  const auto f = vectors.size(1);
  const at::Tensor p = pairs.contiguous();
  std::vector<std::int64_t> r, c;
  for (std::int64_t k = 0; k < p.numel(); ++k) {
    const auto flat = p.data_ptr<std::int64_t>()[k];
    if (flat < 0 || flat >= f * f) return original();
    r.push_back(flat / f);
    c.push_back(flat % f);
  }
  return run_dot_pairs(vectors, std::move(r), std::move(c));
}

// One bag as the kernel takes it, or nullopt where ATen must run it: checks
// what ATen checks (and more: offsets that decrease, an index past the
// table), so that every input the kernel sees is one ATen accepts.
std::optional<kernels::Bag> kernel_bag(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
                                       const c10::optional<at::Tensor>& weights, std::int64_t mode, bool include_last) {
  const bool bf16 = weight.scalar_type() == at::kBFloat16;
  if ((weight.scalar_type() != at::kFloat && !bf16) || weight.dim() != 2 || !weight.is_contiguous()) return std::nullopt;
  if (!is_long_vector(indices) || !is_long_vector(offsets) || !indices.is_contiguous() || !offsets.is_contiguous()) return std::nullopt;
  if (mode != 0 && mode != 1) return std::nullopt;
  const bool weighted = weights.has_value() && weights->defined();
  if (weighted && (mode != 0 || weights->scalar_type() != at::kFloat || weights->dim() != 1 ||
                   weights->numel() != indices.numel() || !weights->is_contiguous())) {
    return std::nullopt;
  }
  const std::int64_t n = indices.numel(), table_rows = weight.size(0);
  const std::int64_t bags = offsets.numel() - (include_last ? 1 : 0);
  if (bags < 0 || (include_last && offsets.numel() == 0)) return std::nullopt;
  const auto* off = offsets.data_ptr<std::int64_t>();
  const auto* idx = indices.data_ptr<std::int64_t>();
  const std::int64_t last_end = include_last ? off[bags] : n;
  if (offsets.numel() > 0 && off[0] != 0) return std::nullopt;
  if (last_end > n) return std::nullopt;
  for (std::int64_t b = 1; b < offsets.numel(); ++b) {
    if (off[b] < off[b - 1] || off[b] > last_end) return std::nullopt;
  }
  for (std::int64_t i = 0; i < last_end; ++i) {
    if (idx[i] < 0 || idx[i] >= table_rows) return std::nullopt;
  }
  kernels::Bag bag;
  if (bf16) {
    bag.table_bf16 = reinterpret_cast<const std::uint16_t*>(weight.data_ptr<at::BFloat16>());
  } else {
    bag.table = weight.data_ptr<float>();
  }
  bag.dim = weight.size(1);
  bag.indices = idx;
  bag.offsets = off;
  bag.bags = bags;
  bag.last_end = last_end;
  bag.weights = weighted ? weights->data_ptr<float>() : nullptr;
  bag.mode = mode == 1 ? kernels::Bag::Mode::kMean : kernels::Bag::Mode::kSum;
  return bag;
}

// ATen's embedding_bag, for a bag the kernel does not take. ATen 1.13
// refuses bf16 tables, so a bf16 table's bag runs on the rows it reads,
// gathered and widened (an id past the table fails in the gather, as
// ATen's own check would): the same pooling of the same values.
at::Tensor aten_bag(const at::Tensor& table, const at::Tensor& indices, const at::Tensor& offsets,
                    const c10::optional<at::Tensor>& weights, std::int64_t mode, bool include_last) {
  if (table.scalar_type() != at::kBFloat16) {
    return std::get<0>(at::embedding_bag(table, indices, offsets, false, mode, false, weights, include_last, c10::nullopt));
  }
  const at::Tensor rows = table.index_select(0, indices.reshape({-1})).to(at::kFloat);
  const at::Tensor each = at::arange(rows.size(0), indices.options()).reshape(indices.sizes());
  return std::get<0>(at::embedding_bag(rows, each, offsets, false, mode, false, weights, include_last, c10::nullopt));
}

std::vector<at::Tensor> embedding_bags(at::TensorList tables, at::TensorList indices, at::TensorList offsets,
                                       const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                                       at::IntArrayRef modes, at::IntArrayRef include_last) {
  const std::size_t count = tables.size();
  TORCH_CHECK(indices.size() == count && offsets.size() == count && per_sample_weights.size() == count &&
                  modes.size() == count && include_last.size() == count,
              "numaserve::embedding_bags: one index, offset, weight, mode and include_last_offset per table");
  std::vector<at::Tensor> out(count);
  std::vector<kernels::Bag> fused;
  std::int64_t rows = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const c10::optional<at::Tensor> weights = per_sample_weights.get(k);
    auto bag = kernel_bag(tables[k], indices[k], offsets[k], weights, modes[k], include_last[k] != 0);
    if (!bag) {
      out[k] = aten_bag(tables[k], indices[k], offsets[k], weights, modes[k], include_last[k] != 0);
      continue;
    }
    out[k] = at::empty({bag->bags, bag->dim}, tables[k].options().dtype(at::kFloat));
    bag->out = out[k].data_ptr<float>();
    rows = std::max(rows, bag->bags);
    fused.push_back(*bag);
  }
  at::parallel_for(0, rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
    kernels::embedding_bags(isa.load(std::memory_order_relaxed), fused.data(), fused.size(), begin, end,
                            bag_reuse.load(std::memory_order_relaxed));
  });
  return out;
}

// A linear layer in bf16 (oneDNN's, where the CPU has bf16 instructions),
// from and to fp32: the rest of the graph stays fp32.
at::Tensor linear_bf16(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  return at::linear(input.to(at::kBFloat16), weight, bias).to(at::kFloat);
}

TORCH_LIBRARY(numaserve, m) {
  m.def("linear_bf16(Tensor input, Tensor weight, Tensor? bias) -> Tensor", &linear_bf16);
  m.def("dot_interaction(Tensor vectors, Tensor rows, Tensor cols) -> Tensor", &dot_interaction);
  m.def("dot_interaction_flat(Tensor vectors, Tensor pairs) -> Tensor", &dot_interaction_flat);
  m.def("embedding_bags(Tensor[] tables, Tensor[] indices, Tensor[] offsets, Tensor?[] per_sample_weights, int[] modes, "
        "int[] include_last_offset) -> Tensor[]",
        &embedding_bags);
}

// ---- Reading the graph.

std::optional<std::int64_t> constant_int(Value* v) {
  auto value = torch::jit::toIValue(v);
  if (!value || !value->isInt()) return std::nullopt;
  return value->toInt();
}

bool constant_none(Value* v) {
  auto value = torch::jit::toIValue(v);
  return value && value->isNone();
}

std::optional<std::vector<std::int64_t>> constant_long_vector(Value* v) {
  auto value = torch::jit::toIValue(v);
  if (!value || !value->isTensor() || !is_long_vector(value->toTensor())) return std::nullopt;
  const at::Tensor t = value->toTensor().contiguous();
  return std::vector<std::int64_t>(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel());
}

// The elements of a constant list, or of a ListConstruct of constants.
std::optional<std::vector<c10::IValue>> constant_list(Value* v) {
  if (auto value = torch::jit::toIValue(v); value && value->isList()) return value->toListRef().vec();
  if (v->node()->kind() != prim::ListConstruct) return std::nullopt;
  std::vector<c10::IValue> out;
  for (Value* input : v->node()->inputs()) {
    auto value = torch::jit::toIValue(input);
    if (!value) return std::nullopt;
    out.push_back(*value);
  }
  return out;
}

std::string name_of(const Value* v) { return "%" + v->debugName(); }

// Whether `t` is `a` with its last two dimensions swapped (a is 3-D: bmm's operand).
bool is_transpose_of(Value* t, Value* a) {
  Node* n = t->node();
  if (n->inputs().empty() || n->input(0) != a) return false;
  auto dim = [](std::int64_t d) { return d < 0 ? d + 3 : d; };
  if (n->kind() == aten::transpose) {
    auto d0 = constant_int(n->input(1)), d1 = constant_int(n->input(2));
    return d0 && d1 && std::min(dim(*d0), dim(*d1)) == 1 && std::max(dim(*d0), dim(*d1)) == 2;
  }
  if (n->kind() == aten::permute) {
    auto order = constant_list(n->input(1));
    if (!order || order->size() != 3) return false;
    std::vector<std::int64_t> d;
    for (const auto& x : *order) d.push_back(x.isInt() ? dim(x.toInt()) : -1);
    return d == std::vector<std::int64_t>{0, 2, 1};
  }
  return false;
}

Node* only_user(Value* v) { return v->uses().size() == 1 ? v->uses()[0].user : nullptr; }

// ---- dot_interaction

// Rewrites one bmm, or says why not.
std::string try_dot_interaction(torch::jit::Graph& graph, Node* bmm, api::GraphRewrite& report) {
  Value* a = bmm->input(0);
  Value* z = bmm->output();
  if (!is_transpose_of(bmm->input(1), a)) return "bmm " + name_of(z) + ": the second operand is not the first transposed";
  Node* next = only_user(z);
  if (next == nullptr) return "bmm " + name_of(z) + ": the product is used whole or more than once, not as one selection";
  Node* selection = nullptr;
  Value* fused = nullptr;
  std::string what;
  if (next->kind() == aten::flatten) {
    Node* select = only_user(next->output());
    const auto start = constant_int(next->input(1)), end = constant_int(next->input(2));
    if (!start || *start != 1 || !end || (*end != -1 && *end != 2) || select == nullptr ||
        select->kind() != aten::index_select || constant_int(select->input(1)).value_or(0) != 1) {
      return "bmm " + name_of(z) + ": flattened but not then index_select(1, constant pairs)";
    }
    auto pairs = constant_long_vector(select->input(2));
    auto triangle_name = pairs ? which_flat_triangle(*pairs) : std::nullopt;
    if (!triangle_name) return "bmm " + name_of(z) + ": the selected pairs are not a constant lower triangle";
    selection = select;
    what = *triangle_name;
    torch::jit::WithInsertPoint here(selection);
    Node* op = graph.insertNode(
        graph.create(c10::Symbol::fromQualString("numaserve::dot_interaction_flat"), {a, select->input(2)}));
    fused = op->output();
  } else {
    Node* index = next;
    if (next->kind() == aten::slice) {  // Z[:, li, lj] slices dimension 0 whole first
      const bool whole = constant_int(next->input(1)).value_or(-1) == 0 &&
                         (constant_none(next->input(2)) || constant_int(next->input(2)).value_or(-1) == 0) &&
                         constant_none(next->input(3)) && constant_int(next->input(4)).value_or(0) == 1;
      index = whole ? only_user(next->output()) : nullptr;
    }
    auto list = index != nullptr && index->kind() == aten::index ? constant_list(index->input(1)) : std::nullopt;
    if (!list) return "bmm " + name_of(z) + ": not followed by .flatten(1).index_select or [:, li, lj] with constant indices";
    if (list->size() != 3 || !(*list)[0].isNone() || !(*list)[1].isTensor() || !(*list)[2].isTensor() ||
        !is_long_vector((*list)[1].toTensor()) || !is_long_vector((*list)[2].toTensor()) ||
        (*list)[1].toTensor().numel() != (*list)[2].toTensor().numel()) {
      return "bmm " + name_of(z) + ": indexed, but not as [:, li, lj] with two constant index vectors";
    }
    const at::Tensor li = (*list)[1].toTensor().contiguous(), lj = (*list)[2].toTensor().contiguous();
    std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
    for (std::int64_t k = 0; k < li.numel(); ++k) pairs.emplace_back(li.data_ptr<std::int64_t>()[k], lj.data_ptr<std::int64_t>()[k]);
    auto triangle_name = which_triangle(pairs);
    if (!triangle_name) return "bmm " + name_of(z) + ": the selected pairs [li, lj] are not a lower triangle";
    selection = index;
    what = *triangle_name;
    torch::jit::WithInsertPoint here(selection);
    Value* rows = graph.insertConstant(li);
    Value* cols = graph.insertConstant(lj);
    Node* op = graph.insertNode(graph.create(c10::Symbol::fromQualString("numaserve::dot_interaction"), {a, rows, cols}));
    fused = op->output();
  }
  fused->setType(c10::TensorType::get());
  selection->output()->replaceAllUsesWith(fused);
  report.applied.push_back("bmm " + name_of(z) + " of " + name_of(a) + " and its " + what +
                           " -> numaserve::" + fused->node()->kind().toUnqualString());
  return "";
}

void rewrite_dot_interactions(torch::jit::Block* block, torch::jit::Graph& graph, api::GraphRewrite& report) {
  std::vector<Node*> bmms;
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) rewrite_dot_interactions(inner, graph, report);
    if (n->kind() == aten::bmm) bmms.push_back(n);
  }
  for (Node* bmm : bmms) {
    if (auto why = try_dot_interaction(graph, bmm, report); !why.empty()) report.not_applied.push_back(why);
  }
}

// ---- embedding_bags

struct BagCall {
  Node* node;
  std::int64_t mode;
  bool include_last;
};

// An embedding_bag the fused op computes, or why not.
std::variant<BagCall, std::string> bag_call(Node* n) {
  const std::string name = "embedding_bag " + name_of(n->output(0));
  if (n->inputs().size() != 8 && n->inputs().size() != 9) return name + ": an overload this pass does not know";
  const auto mode = constant_int(n->input(4));
  if (!mode) return name + ": its mode is not a constant";
  if (*mode == 2) return name + ": mode max (only sum and mean are fused)";
  if (*mode != 0 && *mode != 1) return name + ": unknown mode " + std::to_string(*mode);
  auto last = torch::jit::toIValue(n->input(7));
  if (!last || !last->isBool()) return name + ": include_last_offset is not a constant";
  if (n->inputs().size() == 9 && !constant_none(n->input(8))) return name + ": has a padding_idx (not fused)";
  for (std::size_t k = 1; k < n->outputs().size(); ++k) {
    if (n->output(k)->hasUses()) return name + ": its offset2bag/bag_size/max_indices outputs are used";
  }
  return BagCall{n, *mode, last->toBool()};
}

// Replaces a run of adjacent bag calls with one numaserve::embedding_bags.
void fuse_bags(torch::jit::Graph& graph, const std::vector<BagCall>& group, api::GraphRewrite& report) {
  torch::jit::WithInsertPoint here(group.back().node->next());
  std::vector<Value*> tables, indices, offsets, weights;
  std::vector<std::int64_t> modes, include_last;
  std::string names;
  for (const auto& call : group) {
    tables.push_back(call.node->input(0));
    indices.push_back(call.node->input(1));
    offsets.push_back(call.node->input(2));
    weights.push_back(call.node->input(6));
    modes.push_back(call.mode);
    include_last.push_back(call.include_last ? 1 : 0);
    names += (names.empty() ? "" : ", ") + name_of(call.node->output(0));
  }
  auto list = [&graph](const c10::TypePtr& element, const std::vector<Value*>& values) {
    return graph.insertNode(graph.createList(element, values))->output();
  };
  // None arguments go into the Tensor?[] as None; a weight tensor as itself.
  Value* none_or_weights = list(c10::OptionalType::ofTensor(), weights);
  Node* op = graph.insertNode(graph.create(c10::Symbol::fromQualString("numaserve::embedding_bags"),
                                           {list(c10::TensorType::get(), tables), list(c10::TensorType::get(), indices),
                                            list(c10::TensorType::get(), offsets), none_or_weights,
                                            graph.insertConstant(modes), graph.insertConstant(include_last)}));
  op->output()->setType(c10::ListType::ofTensors());
  Node* unpack = graph.insertNode(graph.createListUnpack(op->output(), group.size()));
  for (std::size_t k = 0; k < group.size(); ++k) {
    unpack->output(k)->setType(c10::TensorType::get());
    group[k].node->output(0)->replaceAllUsesWith(unpack->output(k));
  }
  report.applied.push_back(std::to_string(group.size()) + " embedding_bag call" + (group.size() > 1 ? "s" : "") + " (" +
                           names + ") -> one numaserve::embedding_bags");
}

// The top node of `n` in `block` (n itself, or the node whose sub-block holds it).
Node* in_block(Node* n, torch::jit::Block* block) {
  while (n != nullptr && n->owningBlock() != block) n = n->owningBlock()->owningNode();
  return n;
}

void rewrite_bags(torch::jit::Block* block, torch::jit::Graph& graph, torch::jit::AliasDb& db,
                  std::vector<std::vector<BagCall>>& groups, api::GraphRewrite& report) {
  std::vector<BagCall> group;
  auto close = [&] {
    if (!group.empty()) groups.push_back(std::move(group));
    group.clear();
  };
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (Node* n : nodes) {
    for (torch::jit::Block* inner : n->blocks()) rewrite_bags(inner, graph, db, groups, report);
    if (n->kind() != aten::embedding_bag) continue;
    auto call = bag_call(n);
    if (auto* why = std::get_if<std::string>(&call)) {
      report.not_applied.push_back(*why);
      continue;
    }
    const auto& bag = std::get<BagCall>(call);
    // Join the group if this call (with what it needs) can move up next to
    // the group's last, and no earlier member's result is used before it.
    bool joins = !group.empty() && db.moveAfterTopologicallyValid(n, group.back().node);
    for (std::size_t k = 0; joins && k < group.size(); ++k) {
      for (const auto& use : group[k].node->output(0)->uses()) {
        Node* user = in_block(use.user, block);
        if (user == nullptr || !user->isAfter(n)) joins = false;
      }
    }
    if (!joins) close();
    group.push_back(bag);
  }
  close();
}

void rewrite_embedding_bags(torch::jit::Graph& graph, const std::shared_ptr<torch::jit::Graph>& shared, api::GraphRewrite& report) {
  std::vector<std::vector<BagCall>> groups;
  {
    torch::jit::AliasDb db(shared, /*isFrozen=*/true);
    rewrite_bags(graph.block(), graph, db, groups, report);
  }
  for (const auto& group : groups) fuse_bags(graph, group, report);
}

// ---- bf16

void nodes_of_kind(torch::jit::Block* block, c10::Symbol kind, std::vector<Node*>& out) {
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) nodes_of_kind(inner, kind, out);
    if (n->kind() == kind) out.push_back(n);
  }
}

std::optional<at::Tensor> constant_tensor(Value* v) {
  auto value = torch::jit::toIValue(v);
  if (!value || !value->isTensor()) return std::nullopt;
  return value->toTensor();
}

std::string shape_of(const at::Tensor& t) {
  std::string out;
  for (const auto size : t.sizes()) out += (out.empty() ? "" : " x ") + std::to_string(size);
  return out;
}

// Whether every use of `table` is as a table of numaserve::embedding_bags
// (through the list it is passed in), so that it may become bf16.
bool only_bags_read(Value* table) {
  for (const auto& use : table->uses()) {
    if (use.user->kind() != prim::ListConstruct) return false;
    for (const auto& list_use : use.user->output()->uses()) {
      if (list_use.user->kind().toQualString() != std::string("numaserve::embedding_bags") || list_use.offset != 0) return false;
    }
  }
  return true;
}

// Whether a constant of `block` that is still used holds memory of `storage`.
bool still_read(torch::jit::Block* block, const c10::StorageImpl* storage) {
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) {
      if (still_read(inner, storage)) return true;
    }
    if (n->kind() != prim::Constant || !n->output()->hasUses()) continue;
    const auto t = constant_tensor(n->output());
    if (t && t->has_storage() && t->storage().unsafeGetStorageImpl() == storage) return true;
  }
  return false;
}

}  // namespace

api::GraphRewrite to_bf16(torch::jit::Module& optimized, const Bf16Memory& memory) {
  api::GraphRewrite report{"bf16", {}, {}};
  const std::shared_ptr<torch::jit::Graph> graph = optimized.get_method("forward").graph();
  // New constants go first in the graph, before every use.
  torch::jit::WithInsertPoint first(graph->block()->nodes().front());
  std::map<const void*, Value*> narrowed;  // a table's fp32 data -> its bf16 constant: a table read twice is narrowed once
  std::vector<Node*> bags;
  nodes_of_kind(graph->block(), c10::Symbol::fromQualString("numaserve::embedding_bags"), bags);
  for (Node* op : bags) {
    Node* list = op->input(0)->node();
    if (list->kind() != prim::ListConstruct) continue;
    for (Value* table : list->inputs()) {
      const auto weight = constant_tensor(table);
      if (!weight || weight->scalar_type() != at::kFloat || weight->dim() != 2) continue;
      const std::string what = "embedding table " + name_of(table) + " (" + shape_of(*weight) + ")";
      if (!only_bags_read(table)) {
        report.not_applied.push_back(what + ": also read by another op, kept fp32");
        continue;
      }
      auto done = narrowed.find(weight->data_ptr());
      if (done == narrowed.end()) {
        done = narrowed.emplace(weight->data_ptr(), graph->insertConstant(memory.narrow(*weight))).first;
        report.applied.push_back(what + " -> bf16");
      }
      table->replaceAllUsesWith(done->second);
      if (!still_read(graph->block(), weight->storage().unsafeGetStorageImpl())) memory.unread(*weight);
    }
  }
  std::vector<Node*> linears;
  nodes_of_kind(graph->block(), aten::linear, linears);
  for (Node* linear : linears) {
    const auto weight = constant_tensor(linear->input(1));
    const auto bias = constant_tensor(linear->input(2));
    const std::string what = "linear " + name_of(linear->output());
    if (!weight || weight->scalar_type() != at::kFloat || weight->dim() != 2 ||
        (!bias && !constant_none(linear->input(2))) || (bias && bias->scalar_type() != at::kFloat)) {
      report.not_applied.push_back(what + ": its weight or bias is not a constant fp32 tensor, kept fp32");
      continue;
    }
    const auto inputs = weight->size(1), outputs = weight->size(0);
    const std::string shape = " (" + std::to_string(inputs) + " -> " + std::to_string(outputs) + ")";
    if (inputs < kBf16MinInputs || inputs * outputs < kBf16MinWeights) {
      report.not_applied.push_back(what + shape + ": kept fp32 (under " + std::to_string(kBf16MinInputs) + " inputs or " +
                                   std::to_string(kBf16MinWeights) + " weights, a bf16 product is slower)");
      continue;
    }
    Value* w = graph->insertConstant(memory.narrow(*weight));
    Value* b = bias ? graph->insertConstant(memory.narrow(*bias)) : linear->input(2);
    torch::jit::WithInsertPoint here(linear);
    Node* op = graph->insertNode(graph->create(c10::Symbol::fromQualString("numaserve::linear_bf16"), {linear->input(0), w, b}));
    op->output()->setType(c10::TensorType::get());
    linear->output()->replaceAllUsesWith(op->output());
    linear->destroy();
    for (const auto& fp32 : {weight, bias}) {
      if (fp32 && !still_read(graph->block(), fp32->storage().unsafeGetStorageImpl())) memory.unread(*fp32);
    }
    report.applied.push_back(what + shape + " -> numaserve::linear_bf16");
  }
  torch::jit::EliminateDeadCode(graph);
  graph->lint();
  return report;
}

Optimized optimize(const torch::jit::Module& module) {
  Optimized out;
  out.report.state = "unchanged";
  torch::jit::Module frozen;
  try {
    // The clone shares the parameters' storage: no second copy of the weights.
    frozen = torch::jit::freeze_module(module);
  } catch (const std::exception& e) {
    out.report.state = "failed";
    const std::string text = e.what();
    out.report.reason = "cannot freeze the module: " + text.substr(0, text.find('\n'));
    return out;
  }
  const std::shared_ptr<torch::jit::Graph> graph = frozen.get_method("forward").graph();
  // `embedding_bag(...)[0]` leaves a tuple the bags' other outputs flow into.
  torch::jit::LowerSimpleTuples(graph);
  torch::jit::EliminateDeadCode(graph);

  api::GraphRewrite dots{"dot_interaction", {}, {}};
  rewrite_dot_interactions(graph->block(), *graph, dots);
  torch::jit::EliminateDeadCode(graph);
  api::GraphRewrite bags{"embedding_bags", {}, {}};
  rewrite_embedding_bags(*graph, graph, bags);
  torch::jit::EliminateDeadCode(graph);
  graph->lint();

  const bool applied = !dots.applied.empty() || !bags.applied.empty();
  out.report.rewrites = {std::move(dots), std::move(bags)};
  if (applied) {
    out.report.state = "optimized";
    out.module = std::move(frozen);
  }
  return out;
}

std::string kernel_isa() { return std::string(kernels::isa_name(isa.load())); }

void set_bag_reuse(bool reuse) { bag_reuse.store(reuse); }

Status set_kernel_isa(const std::string& name) {
  std::string names;
  for (const auto path : kernels::supported_isas()) {
    if (kernels::isa_name(path) == name) {
      isa.store(path);
      return {};
    }
    names += (names.empty() ? "" : ", ") + std::string(kernels::isa_name(path));
  }
  return make_error(Error::Code::kInvalidArgument, "kernels: '" + name + "' is not a path this CPU runs (" + names + ")");
}

std::map<std::string, int> fused_ops(const torch::jit::Module& module) {
  std::map<std::string, int> out;
  std::vector<torch::jit::Block*> blocks = {module.get_method("forward").graph()->block()};
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (Node* n : block->nodes()) {
      const std::string kind = n->kind().toQualString();
      if (kind.rfind("numaserve::", 0) == 0) ++out[kind];
      for (torch::jit::Block* inner : n->blocks()) blocks.push_back(inner);
    }
  }
  return out;
}

}  // namespace numaserve::model
