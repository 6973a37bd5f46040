#pragma once
// The rewrites optimize() runs in this order, one file a pass (graph.h says
// what each does): each rewrites what it takes and says in `report` why it
// left the rest. Brings LibTorch: included only by graph/'s own files.

#include <torch/script.h>

#include <memory>

#include "api/model.h"

namespace numaserve::graph {

void rewrite_dot_interactions(torch::jit::Block* block, torch::jit::Graph& graph, api::GraphRewrite& report);
void rewrite_embedding_bags(torch::jit::Graph& graph, const std::shared_ptr<torch::jit::Graph>& shared,
                            api::GraphRewrite& report);
void rewrite_linear_chains(torch::jit::Block* block, torch::jit::Graph& graph, api::GraphRewrite& report);
void rewrite_elementwise(torch::jit::Block* block, torch::jit::Graph& graph, api::GraphRewrite& report);

}  // namespace numaserve::graph
