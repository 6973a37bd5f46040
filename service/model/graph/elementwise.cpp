// elementwise: sigmoid and tanh become numaserve::sigmoid/tanh, the same
// function for every element (graph.h).
#include "graph/passes.h"

#include <vector>

#include "graph/ir.h"

namespace numaserve::graph {
namespace {

using namespace ir;



}  // namespace

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

}  // namespace numaserve::graph
