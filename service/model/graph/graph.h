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
//   linear_chains    linear (+ relu) layers with constant fp32 weights, each
//                    feeding only the next, become one numaserve::linear_chain
//                    on weights packed at load (kernels/linear.h): the CPU's
//                    best instructions whatever the BLAS chose, and a row's
//                    output the same bits whatever its batch;
//   elementwise      sigmoid and tanh become numaserve::sigmoid/tanh, the
//                    same function for every element (ATen's computes the
//                    last elements of a tensor another way: a row's score
//                    would depend on where its batch ends);
//
// and, for a model served below fp32, narrow() below on the rewritten forward.
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
#include "features/model_spec.h"
#include "kernels/linear.h"

namespace numaserve::graph {

struct Optimized {
  std::optional<torch::jit::Module> module;  // set when at least one rewrite applied
  api::GraphReport report;
};

// Freezes a copy of `module` (which shares its weights) and rewrites its
// forward; `linear_chains` false leaves every linear layer to LibTorch (the
// benchmark's comparison). Never throws: a module that cannot be frozen
// comes back unset, with the reason.
Optimized optimize(const torch::jit::Module& module, bool linear_chains = true);

// Serving below fp32 (model.yaml's precision and embedding_precision), in
// place in an optimized module that has not run yet (a run keeps the plan
// it compiled):
//   tables  the embedding tables that only numaserve::embedding_bags reads
//           become bf16, or rowwise int8 / int4 (kernels.h quantize_rows:
//           an int4 table of an odd dim becomes int8; one holding values
//           beyond fp16's range stays fp32), one table at a time, each
//           table's fp32 memory released before the next is converted;
//   chains  every numaserve::linear_chain's layers are packed in bf16 or
//           int8 (kernels/linear.h), except an int8 chain's narrow layers
//           (a score's last), which stay fp32. A chain takes and gives
//           fp32: the interaction, the other ops and the scores stay fp32.
// `allocate` gives the copies' memory, uninitialized (a large one in memory
// that asked for huge pages), written by the calling thread: on its node.
// Once no constant of the graph reads an fp32 weight's memory any more,
// `unread` is told, one weight at a time: freeing it there keeps the load's
// peak near the fp32 size rather than that plus the copies.
struct NarrowMemory {
  std::function<at::Tensor(at::IntArrayRef sizes, at::ScalarType type)> allocate;
  std::function<void(const at::Tensor& fp32)> unread;
};
struct Narrowing {
  features::TablePrecision tables = features::TablePrecision::kFp32;
  kernels::LinearPrecision chains = kernels::LinearPrecision::kFp32;
  // Each chain's first layer too (false: it stays fp32; it reads features
  // or the interaction, not the model's own activations, and rounding those
  // moved some models' scores past their drift bound).
  bool first_layers = true;
};
api::GraphRewrite narrow(torch::jit::Module& optimized, const Narrowing& to, const NarrowMemory& memory);

// Tables shipped already rowwise (model.yaml quantized_tables): each one's
// rows, read from its file at load, and the placeholder the module holds in
// its place (one float seen as [rows][dim], never materialized).
struct ShippedTable {
  std::string name;  // model.yaml's table
  std::string file;  // tables/<name>.rowwise, for the report and refusals
  at::Tensor rows;   // [rows][kernels::rowwise_row_bytes(dim, bits)] uint8
  int bits = 8;
  at::Tensor placeholder;
};
// Puts each shipped table's rows in place of its placeholder in an optimized
// forward that has not run (report: one line a table). Refused, naming the
// table, where the forward reads a placeholder other than as a table of
// numaserve::embedding_bags alone: nothing else reads rowwise rows.
Status ship_tables(torch::jit::Module& optimized, const std::vector<ShippedTable>& tables, api::GraphRewrite& report);

// The forward graph's numaserve:: nodes by kind ("numaserve::dot_interaction"
// -> 1), for the report's tests.
std::map<std::string, int> fused_ops(const torch::jit::Module& module);

// A forward's linear layers: on numaserve::linear_chain (own; `precision`
// the narrowest its chains run in), and left to LibTorch (aten::linear,
// addmm, mm, matmul).
// `module` as written is frozen first (a copy sharing its weights), so that
// its submodules' layers count; an optimized one is frozen already.
struct LinearLayers {
  int own = 0, libtorch = 0;
  kernels::LinearPrecision precision = kernels::LinearPrecision::kFp32;
};
LinearLayers linear_layers(const torch::jit::Module& module, bool frozen);

// The linear chains of an fp32 optimized forward run on `rows` random rows,
// in fp32 and in `candidate` (packed here, then dropped; narrow layers as
// narrow() leaves them), on the calling thread: microseconds per run of all
// chains, medians of alternating rounds. What -if-available decides by: the
// model's own shapes on this CPU.
struct ChainTiming {
  int chains = 0;
  double fp32_us = 0, candidate_us = 0;
};
ChainTiming time_linear_chains(const torch::jit::Module& optimized, std::int64_t rows, kernels::LinearPrecision candidate);

}  // namespace numaserve::graph
