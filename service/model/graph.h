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
//                    that reads every table in one pass over the rows;
//
// and, for a model served in bf16, to_bf16 below on the rewritten forward.
//
// Each rewrite checks the constants and shapes it needs and leaves anything
// else alone, saying why in the report. The fused ops compute exactly what
// the ops they replace compute; an input their kernels do not take (another
// dtype, an index out of range) runs the original ATen ops, so errors stay
// ATen's. Included only by model.cpp: it brings LibTorch.

#include <torch/script.h>

#include <functional>
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

// bf16 (a model served with precision bf16), in place in an optimized
// module that has not run yet (a run keeps the plan it compiled): the
// embedding tables that only numaserve::embedding_bags reads, and the
// weights of the linear layers of at least kBf16MinInputs inputs and
// kBf16MinWeights weights (smaller ones ran slower in bf16: oneDNN's
// per-call cost outweighs the products), become bf16 constants made by
// `narrow`; a bf16 layer takes and gives fp32 (numaserve::linear_bf16), so
// the interaction, the other ops and the scores stay fp32. Once no constant
// of the graph reads an fp32 weight's memory any more, `unread` is told, one
// weight at a time: freeing it there keeps the load's peak near the fp32
// size rather than 1.5 times it.
struct Bf16Memory {
  std::function<at::Tensor(const at::Tensor& fp32)> narrow;
  std::function<void(const at::Tensor& fp32)> unread;
};
inline constexpr std::int64_t kBf16MinInputs = 32;
inline constexpr std::int64_t kBf16MinWeights = 8192;
api::GraphRewrite to_bf16(torch::jit::Module& optimized, const Bf16Memory& memory);

// The forward graph's numaserve:: nodes by kind ("numaserve::dot_interaction"
// -> 1), for the report's tests.
std::map<std::string, int> fused_ops(const torch::jit::Module& module);

}  // namespace numaserve::model
