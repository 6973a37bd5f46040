// The passes that put the fused ops (ops.cpp) into a frozen forward graph,
// and the graph reading they share with narrow.cpp. See graph.h.
#include "model/graph.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/lower_tuples.h>

#include <algorithm>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kernels/linear.h"
#include "model/graph_ir.h"
#include "model/model.h"
#include "model/triangle.h"

namespace numaserve::model {
namespace ir {

namespace prim = c10::prim;

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

Node* only_user(Value* v) { return v->uses().size() == 1 ? v->uses()[0].user : nullptr; }

std::string shape_of(const at::Tensor& t) {
  std::string out;
  for (const auto size : t.sizes()) out += (out.empty() ? "" : " x ") + std::to_string(size);
  return out;
}

void nodes_of_kind(torch::jit::Block* block, c10::Symbol kind, std::vector<Node*>& out) {
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) nodes_of_kind(inner, kind, out);
    if (n->kind() == kind) out.push_back(n);
  }
}

}  // namespace ir

namespace {

using namespace ir;
namespace aten = c10::aten;
namespace prim = c10::prim;

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
                                            graph.insertConstant(modes), graph.insertConstant(include_last),
                                            // every table fp32 (or bf16) here: narrow.cpp makes some rowwise
                                            graph.insertConstant(std::vector<std::int64_t>(group.size(), 0))}));
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

// "linear %x (77 -> 128) + relu"
std::string step_name(const LinearStep& step) {
  const at::Tensor weight = *constant_tensor(step.linear->input(1));
  return "linear " + name_of(step.linear->output()) + " (" + std::to_string(weight.size(1)) + " -> " +
         std::to_string(weight.size(0)) + ")" + (step.relu ? " + relu" : "");
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

}  // namespace

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
  } else if (ir::kernel_path() == kernels::Isa::kPortable) {
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
