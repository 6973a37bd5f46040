// optimize(): freezes a copy and runs the passes (passes.h) in order;
// fused_ops() for the report's tests. See graph.h.
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/lower_tuples.h>

#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/ir.h"
#include "graph/passes.h"

namespace numaserve::graph {

using torch::jit::Node;

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

}  // namespace numaserve::graph
