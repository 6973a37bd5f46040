// dot_interaction: bmm(T, T^T) and the selection of its lower triangle become
// numaserve::dot_interaction(_flat) (graph.h).
#include "graph/passes.h"

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/triangle.h"

namespace numaserve::graph {
namespace {

using namespace ir;

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

}  // namespace

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

}  // namespace numaserve::graph
