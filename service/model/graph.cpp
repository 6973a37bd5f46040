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
#include <chrono>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/linear.h"
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

kernels::LinearPrecision precision_of(const at::Tensor& packed) {
  return packed.scalar_type() == at::kBFloat16 ? kernels::LinearPrecision::kBf16 : kernels::LinearPrecision::kFp32;
}

// A chain's layers as the kernels take them: each packed tensor's dtype
// says its layer's precision (float: fp32, bfloat16: bf16).
kernels::LinearChain chain_of(at::TensorList weights, const c10::List<c10::optional<at::Tensor>>& biases, at::TensorList packed,
                              at::IntArrayRef relu) {
  kernels::LinearChain chain;
  for (std::size_t l = 0; l < weights.size(); ++l) {
    const c10::optional<at::Tensor> bias = biases.get(l);
    chain.layers.push_back({packed[l].data_ptr(), bias && bias->defined() ? bias->data_ptr<float>() : nullptr, weights[l].size(1),
                            weights[l].size(0), relu[l] != 0, precision_of(packed[l])});
  }
  return chain;
}

// linear (+ relu), one after another, on weights packed at load
// (kernels/linear.h). An input the kernels do not take (another dtype, a
// width that is not the first layer's) runs ATen's linear with the same
// weights, so errors stay ATen's; a bf16 chain's weights are bf16 there.
at::Tensor linear_chain(const at::Tensor& input, at::TensorList weights, const c10::List<c10::optional<at::Tensor>>& biases,
                        at::TensorList packed, at::IntArrayRef relu) {
  const std::size_t count = weights.size();
  TORCH_CHECK(count > 0 && biases.size() == count && packed.size() == count && relu.size() == count,
              "numaserve::linear_chain: one weight, bias, packed weight and activation per layer");
  const std::int64_t inputs = weights[0].size(1);
  if (input.scalar_type() != at::kFloat || input.dim() == 0 || input.size(-1) != inputs) {
    at::Tensor x = input;
    for (std::size_t l = 0; l < count; ++l) {
      c10::optional<at::Tensor> bias = biases.get(l);
      const bool narrow = weights[l].scalar_type() == at::kBFloat16;
      if (narrow && bias && bias->defined()) bias = bias->to(at::kBFloat16);
      x = at::linear(narrow ? x.to(at::kBFloat16) : x, weights[l], bias);
      if (narrow) x = x.to(at::kFloat);
      if (relu[l] != 0) x = at::relu(x);
    }
    return x;
  }
  const at::Tensor x = input.contiguous();
  const kernels::LinearChain chain = chain_of(weights, biases, packed, relu);
  std::vector<std::int64_t> sizes = input.sizes().vec();
  sizes.back() = chain.layers.back().outputs;
  at::Tensor out = at::empty(sizes, x.options());
  const std::int64_t rows = inputs == 0 ? 0 : x.numel() / inputs;
  at::parallel_for(0, rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
    kernels::run_chain(isa.load(std::memory_order_relaxed), chain, x.data_ptr<float>(), out.data_ptr<float>(), begin, end);
  });
  return out;
}

// f(x) elementwise by a position-independent kernel (kernels.h sigmoid);
// another dtype or layout runs ATen's.
template <void (*kernel)(const float*, float*, std::size_t), at::Tensor (*aten_op)(const at::Tensor&)>
at::Tensor elementwise(const at::Tensor& x) {
  if (x.scalar_type() != at::kFloat) return aten_op(x);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  kernel(in.data_ptr<float>(), out.data_ptr<float>(), static_cast<std::size_t>(in.numel()));
  return out;
}

at::Tensor sigmoid(const at::Tensor& x) { return elementwise<kernels::sigmoid, at::sigmoid>(x); }
at::Tensor tanh(const at::Tensor& x) { return elementwise<kernels::tanh, at::tanh>(x); }

TORCH_LIBRARY(numaserve, m) {
  m.def("linear_chain(Tensor input, Tensor[] weights, Tensor?[] biases, Tensor[] packed, int[] relu) -> Tensor", &linear_chain);
  m.def("sigmoid(Tensor x) -> Tensor", &sigmoid);
  m.def("tanh(Tensor x) -> Tensor", &tanh);
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

std::optional<at::Tensor> constant_tensor(Value* v) {
  auto value = torch::jit::toIValue(v);
  if (!value || !value->isTensor()) return std::nullopt;
  return value->toTensor();
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

// ---- linear chains

struct LinearStep {
  Node* linear;
  bool relu;
  Value* out;  // the relu's output when there is one, else the linear's
};

// A linear the kernels take (constant fp32 weight, constant fp32 bias or
// none), or why not.
std::optional<std::string> why_not_linear(Node* n) {
  const std::string name = "linear " + name_of(n->output());
  const auto weight = constant_tensor(n->input(1));
  if (!weight || weight->scalar_type() != at::kFloat || weight->dim() != 2) return name + ": its weight is not a constant fp32 matrix";
  const auto bias = constant_tensor(n->input(2));
  if (!bias && !constant_none(n->input(2))) return name + ": its bias is not a constant";
  if (bias && (bias->scalar_type() != at::kFloat || bias->dim() != 1 || bias->size(0) != weight->size(0))) {
    return name + ": its bias is not an fp32 vector of its outputs";
  }
  return std::nullopt;
}

bool is_relu_of(Node* n, Value* v) {
  return n != nullptr && (n->kind() == aten::relu || n->kind() == aten::relu_) && n->input(0) == v;
}

std::string shape_of(const at::Tensor& t) {
  std::string out;
  for (const auto size : t.sizes()) out += (out.empty() ? "" : " x ") + std::to_string(size);
  return out;
}

// "linear %x (77 -> 128) + relu"
std::string step_name(const LinearStep& step) {
  const at::Tensor weight = *constant_tensor(step.linear->input(1));
  return "linear " + name_of(step.linear->output()) + " (" + std::to_string(weight.size(1)) + " -> " +
         std::to_string(weight.size(0)) + ")" + (step.relu ? " + relu" : "");
}

// A linear layer's fp32 weight [outputs][inputs] packed for the kernels
// (kernels/linear.h), as a tensor the graph holds as a constant: fp32, or
// bf16 pairs. Made by the calling thread: on its NUMA node.
at::Tensor pack(const at::Tensor& weight, kernels::LinearPrecision precision) {
  const at::Tensor w = weight.contiguous();
  const auto inputs = w.size(1), outputs = w.size(0);
  const bool bf16 = precision == kernels::LinearPrecision::kBf16;
  at::Tensor out = at::empty({static_cast<std::int64_t>(kernels::packed_elements(inputs, outputs, precision))},
                             w.options().dtype(bf16 ? at::kBFloat16 : at::kFloat));
  if (bf16) {
    kernels::pack_bf16(w.data_ptr<float>(), inputs, outputs, reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>()));
  } else {
    kernels::pack_fp32(w.data_ptr<float>(), inputs, outputs, out.data_ptr<float>());
  }
  return out;
}

// Replaces one chain with numaserve::linear_chain, its weights packed now:
// by the loading thread, so on its NUMA node.
void fuse_chain(torch::jit::Graph& graph, const std::vector<LinearStep>& chain, api::GraphRewrite& report) {
  torch::jit::WithInsertPoint here(chain.back().out->node()->next());
  std::vector<Value*> weights, biases, packed;
  std::vector<std::int64_t> relu;
  std::string names;
  for (const auto& step : chain) {
    weights.push_back(step.linear->input(1));
    biases.push_back(step.linear->input(2));
    packed.push_back(graph.insertConstant(pack(*constant_tensor(step.linear->input(1)), kernels::LinearPrecision::kFp32)));
    relu.push_back(step.relu ? 1 : 0);
    names += (names.empty() ? "" : ", ") + step_name(step);
  }
  auto list = [&graph](const c10::TypePtr& element, const std::vector<Value*>& values) {
    return graph.insertNode(graph.createList(element, values))->output();
  };
  Node* op = graph.insertNode(graph.create(c10::Symbol::fromQualString("numaserve::linear_chain"),
                                           {chain.front().linear->input(0), list(c10::TensorType::get(), weights),
                                            list(c10::OptionalType::ofTensor(), biases), list(c10::TensorType::get(), packed),
                                            graph.insertConstant(relu)}));
  op->output()->setType(c10::TensorType::get());
  chain.back().out->replaceAllUsesWith(op->output());
  report.applied.push_back(names + " -> numaserve::linear_chain");
}

// Every run of linear (+ relu) whose each output is only the next one's
// input becomes one chain; a linear the kernels do not take stays, named.
void rewrite_linear_chains(torch::jit::Block* block, torch::jit::Graph& graph, api::GraphRewrite& report) {
  std::vector<std::vector<LinearStep>> chains;
  std::vector<Node*> taken;
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) rewrite_linear_chains(inner, graph, report);
    if (n->kind() != aten::linear || std::find(taken.begin(), taken.end(), n) != taken.end()) continue;
    if (auto why = why_not_linear(n)) {
      report.not_applied.push_back(*why);
      continue;
    }
    std::vector<LinearStep> chain;
    for (Node* linear = n; linear != nullptr;) {
      LinearStep step{linear, false, linear->output()};
      if (Node* relu = only_user(step.out); is_relu_of(relu, step.out)) {
        step.relu = true;
        step.out = relu->output();
      }
      chain.push_back(step);
      taken.push_back(linear);
      Node* next = only_user(step.out);
      const bool continues = next != nullptr && next->kind() == aten::linear && next->input(0) == step.out &&
                             next->owningBlock() == block && !why_not_linear(next);
      linear = continues ? next : nullptr;
    }
    chains.push_back(std::move(chain));
  }
  for (const auto& chain : chains) fuse_chain(graph, chain, report);
}

// ---- elementwise

// sigmoid and tanh become numaserve's (kernels.h): the same function for
// every element, so a row's score does not depend on where its batch ends.
void rewrite_elementwise(torch::jit::Block* block, torch::jit::Graph& graph, api::GraphRewrite& report) {
  const std::pair<c10::Symbol, const char*> ops[] = {{aten::sigmoid, "numaserve::sigmoid"}, {aten::tanh, "numaserve::tanh"}};
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (Node* n : nodes) {
    for (torch::jit::Block* inner : n->blocks()) rewrite_elementwise(inner, graph, report);
    for (const auto& [kind, fused] : ops) {
      if (n->kind() != kind || n->inputs().size() != 1) continue;
      torch::jit::WithInsertPoint here(n);
      Node* op = graph.insertNode(graph.create(c10::Symbol::fromQualString(fused), {n->input(0)}));
      op->output()->setType(c10::TensorType::get());
      n->output()->replaceAllUsesWith(op->output());
      report.applied.push_back(std::string(kind.toQualString()) + " " + name_of(n->output()) + " -> " + fused);
    }
  }
}

// ---- bf16

void nodes_of_kind(torch::jit::Block* block, c10::Symbol kind, std::vector<Node*>& out) {
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) nodes_of_kind(inner, kind, out);
    if (n->kind() == kind) out.push_back(n);
  }
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

api::GraphRewrite to_bf16(torch::jit::Module& optimized, const Bf16Memory& memory, const Bf16Parts& parts) {
  api::GraphRewrite report{"bf16", {}, {}};
  const std::shared_ptr<torch::jit::Graph> graph = optimized.get_method("forward").graph();
  // New constants go first in the graph, before every use.
  torch::jit::WithInsertPoint first(graph->block()->nodes().front());
  std::map<const void*, Value*> narrowed;  // a table's fp32 data -> its bf16 constant: a table read twice is narrowed once
  std::vector<Node*> bags;
  if (parts.tables) nodes_of_kind(graph->block(), c10::Symbol::fromQualString("numaserve::embedding_bags"), bags);
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
  std::vector<Node*> chains;
  // bf16 products need the AVX512_BF16 path (the portable one is its reference).
  const std::string path = linear_kernels(true);
  nodes_of_kind(graph->block(), c10::Symbol::fromQualString("numaserve::linear_chain"), chains);
  if (path != "avx512_bf16" && !chains.empty()) {
    report.not_applied.push_back("the linear chains: the kernels' path here (" + std::string(kernels::isa_name(isa.load())) +
                                 ") has no bf16 product, kept fp32");
    chains.clear();
  }
  for (Node* op : chains) {
    Node* weights = op->input(1)->node();
    std::vector<at::Tensor> fp32;
    std::vector<Value*> narrow_weights, packed;
    std::string shapes;
    for (std::size_t l = 0; l < weights->inputs().size(); ++l) {
      Value* w = weights->input(l);
      const at::Tensor weight = constant_tensor(w)->contiguous();
      const auto inputs = weight.size(1), outputs = weight.size(0);
      if (l == 0 && !parts.first_layers) {
        packed.push_back(op->input(3)->node()->input(l));
        narrow_weights.push_back(w);
        report.not_applied.push_back("linear_chain " + name_of(op->output()) + ": its first layer (" + std::to_string(inputs) +
                                     " -> " + std::to_string(outputs) +
                                     ") reads features, not the model's activations: kept fp32 (the drift bound)");
        continue;
      }
      packed.push_back(graph->insertConstant(pack(weight, kernels::LinearPrecision::kBf16)));
      narrow_weights.push_back(graph->insertConstant(memory.narrow(weight)));
      fp32.push_back(*constant_tensor(w));
      shapes += (shapes.empty() ? "" : ", ") + std::to_string(inputs) + " -> " + std::to_string(outputs);
    }
    auto list = [&graph](const std::vector<Value*>& values) {
      return graph->insertNode(graph->createList(c10::TensorType::get(), values))->output();
    };
    Node* fp32_packed = op->input(3)->node();
    {
      torch::jit::WithInsertPoint here(op);
      op->replaceInput(1, list(narrow_weights));
      op->replaceInput(3, list(packed));
    }
    // The fp32 lists go now (not by dead-code elimination, which could take
    // the node the new constants are inserted before), so that the fp32
    // weights are seen unread.
    for (Node* old : {weights, fp32_packed}) {
      if (!old->output()->hasUses()) old->destroy();
    }
    for (const auto& weight : fp32) {
      if (!still_read(graph->block(), weight.storage().unsafeGetStorageImpl())) memory.unread(weight);
    }
    report.applied.push_back("linear_chain " + name_of(op->output()) + " (" + shapes + ") -> bf16");
  }
  torch::jit::EliminateDeadCode(graph);
  graph->lint();
  return report;
}

Optimized optimize(const torch::jit::Module& module, bool linear_chains) {
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
  api::GraphRewrite linears{"linear_chains", {}, {}};
  if (!linear_chains) {
    linears.not_applied.push_back("turned off: every linear layer runs on LibTorch");
  } else if (isa.load() == kernels::Isa::kPortable) {
    // The portable path is the kernels' reference: without FMA in hardware
    // it is far slower than the BLAS's.
    linears.not_applied.push_back("the kernels run their portable path here (no AVX2 and FMA): every linear layer runs on LibTorch");
  } else {
    rewrite_linear_chains(graph->block(), *graph, linears);
    torch::jit::EliminateDeadCode(graph);
  }
  api::GraphRewrite elementwise{"elementwise", {}, {}};
  rewrite_elementwise(graph->block(), *graph, elementwise);
  torch::jit::EliminateDeadCode(graph);
  graph->lint();

  // The elementwise ops alone are no reason to run a rewritten forward.
  const bool applied = !dots.applied.empty() || !bags.applied.empty() || !linears.applied.empty();
  out.report.rewrites = {std::move(dots), std::move(bags), std::move(linears), std::move(elementwise)};
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

LinearLayers linear_layers(const torch::jit::Module& module, bool frozen) {
  LinearLayers out;
  torch::jit::Module copy;
  try {
    copy = frozen ? module : torch::jit::freeze_module(module);
  } catch (const std::exception&) {
    return out;  // a module that cannot be frozen: its layers are not counted
  }
  std::vector<Node*> nodes;
  nodes_of_kind(copy.get_method("forward").graph()->block(), c10::Symbol::fromQualString("numaserve::linear_chain"), nodes);
  for (Node* chain : nodes) {
    out.own += static_cast<int>(chain->input(1)->node()->inputs().size());
    for (Value* p : chain->input(3)->node()->inputs()) {
      const auto packed = constant_tensor(p);
      out.bf16 = out.bf16 || (packed && packed->scalar_type() == at::kBFloat16);
    }
  }
  for (const auto kind : {aten::linear, aten::addmm, aten::mm, aten::matmul}) {
    nodes.clear();
    nodes_of_kind(copy.get_method("forward").graph()->block(), kind, nodes);
    out.libtorch += static_cast<int>(nodes.size());
  }
  return out;
}

ChainTiming time_linear_chains(const torch::jit::Module& optimized, std::int64_t rows) {
  ChainTiming out;
  std::vector<Node*> ops;
  nodes_of_kind(optimized.get_method("forward").graph()->block(), c10::Symbol::fromQualString("numaserve::linear_chain"), ops);
  struct Timed {
    kernels::LinearChain fp32, bf16;
    at::Tensor in, out;
  };
  std::vector<Timed> chains;
  std::vector<at::Tensor> keep;  // the bf16 packs, alive while timed
  for (Node* op : ops) {
    Timed t;
    Node* weights = op->input(1)->node();
    const auto relu = constant_list(op->input(4));
    for (std::size_t l = 0; l < weights->inputs().size(); ++l) {
      const auto weight = constant_tensor(weights->input(l));
      const auto packed = constant_tensor(op->input(3)->node()->input(l));
      const auto bias = constant_tensor(op->input(2)->node()->input(l));
      if (!weight || !packed || !relu || packed->scalar_type() != at::kFloat) return out;
      const at::Tensor w = weight->contiguous();
      const auto inputs = w.size(1), outputs = w.size(0);
      const at::Tensor narrow = pack(w, kernels::LinearPrecision::kBf16);
      keep.push_back(narrow);
      const float* b = bias ? bias->data_ptr<float>() : nullptr;
      const bool r = (*relu)[l].toInt() != 0;
      t.fp32.layers.push_back({packed->data_ptr(), b, inputs, outputs, r, kernels::LinearPrecision::kFp32});
      t.bf16.layers.push_back({narrow.data_ptr(), b, inputs, outputs, r, kernels::LinearPrecision::kBf16});
    }
    t.in = at::randn({rows, t.fp32.layers.front().inputs});
    t.out = at::empty({rows, t.fp32.layers.back().outputs});
    chains.push_back(std::move(t));
  }
  out.chains = static_cast<int>(chains.size());
  if (chains.empty()) return out;
  const kernels::Isa path = isa.load();
  auto run_all = [&](bool bf16) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& t : chains) kernels::run_chain(path, bf16 ? t.bf16 : t.fp32, t.in.data_ptr<float>(), t.out.data_ptr<float>(), 0, rows);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  };
  run_all(false);  // the first run pays for the scratch buffers and cold caches
  run_all(true);
  std::vector<double> fp32, bf16;
  for (int round = 0; round < 15; ++round) {
    fp32.push_back(run_all(false));
    bf16.push_back(run_all(true));
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  out.fp32_us = median(fp32);
  out.bf16_us = median(bf16);
  return out;
}

std::string linear_kernels(bool bf16) {
  return std::string(kernels::linear_path(isa.load(), bf16 ? kernels::LinearPrecision::kBf16 : kernels::LinearPrecision::kFp32));
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
