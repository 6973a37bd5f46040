// linear_chains: linear (+ relu) layers, each feeding only the next, become
// one numaserve::linear_chain on weights packed at load (graph.h).
#include "graph/passes.h"

#include <torch/csrc/jit/ir/constants.h>

#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "kernels/linear.h"

namespace numaserve::graph {
namespace {

using namespace ir;

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

}  // namespace

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

}  // namespace numaserve::graph
