#pragma once
// Graph rewrites at load (`--graph-optimizations on`): a frozen copy of a
// TorchScript module whose forward runs ranking models' two hot patterns as
// fused ops (kernels/), wherever the graph has them and whatever wrote it:
//
//   dot_interaction  bmm(T, T.transpose(1, 2)) and the selection of its
//                    lower triangle, as `.flatten(1).index_select(1, pairs)`
//                    or `Z[:, li, lj]` with constant indices, becomes
//                    numaserve::dot_interaction(_flat), which computes only
//                    the pairs it returns;
//   embedding_bags   embedding_bag calls (sum or mean, with or without
//                    per-sample weights, no padding_idx) in one block, moved
//                    together where the graph's data and memory
//                    dependencies allow, become one numaserve::embedding_bags
//                    that reads every table in one pass over the rows.
//
// Each rewrite checks the constants and shapes it needs and leaves anything
// else alone, saying why in the report. The fused ops compute exactly what
// the ops they replace compute; an input their kernels do not take (another
// dtype, an index out of range) runs the original ATen ops, so errors stay
// ATen's. Included only by model.cpp: it brings LibTorch.

#include <torch/script.h>

#include <map>
#include <optional>
#include <string>

#include "api/model.h"

namespace numaserve::model {

struct Optimized {
  std::optional<torch::jit::Module> module;  // set when at least one rewrite applied
  api::GraphReport report;
};

// Freezes a copy of `module` (which shares its weights) and rewrites its
// forward. Never throws: a module that cannot be frozen comes back unset,
// with the reason.
Optimized optimize(const torch::jit::Module& module);

// The forward graph's numaserve:: nodes by kind ("numaserve::dot_interaction"
// -> 1), for the report's tests.
std::map<std::string, int> fused_ops(const torch::jit::Module& module);

}  // namespace numaserve::model
