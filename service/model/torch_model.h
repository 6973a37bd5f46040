#pragma once
// What model.cpp, precision.cpp (serving below fp32) and workload.cpp (the
// work a forward asks, the rounding bound) share: the loaded model's state
// and running a forward. Brings LibTorch: included only by those three.

#include <torch/script.h>

#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/kernel_path.h"
#include "model/model.h"

namespace numaserve::model {

struct TorchModel::Impl {
  torch::jit::Module module;                    // as written; its parameters are the weights
  std::optional<torch::jit::Module> optimized;  // sharing them, when a rewrite applied and checked out
  api::GraphReport report;
  api::PrecisionReport precision;
  graph::LinearLayers linear;  // of the running forward
  std::vector<graph::ShippedTable> shipped;  // model.yaml's quantized_tables, read

  const torch::jit::Module& running() const { return optimized ? *optimized : module; }
};

// A model served narrowed released its fp32 weights: running the model as
// written is refused then, saying so.
Status fp32_weights_kept(const api::PrecisionReport& precision, const std::string& model);
// A LibTorch exception as an error a user can act on, after `what`.
Error torch_error(const std::string& what, const std::exception& e);
// forward's arguments for `batch`: dense [N, D], then the bags' indices
// and offsets, borrowing the batch's memory.
std::vector<c10::IValue> inputs_of(const features::Batch& batch);
Result<at::Tensor> run(const torch::jit::Module& m, const features::Batch& batch, const std::string& what);
// The largest difference of two score tensors in units of `tolerance`:
// relative to the score (absolute below a magnitude of 1) when `relative`,
// else absolute. A NaN against a number, or another count: infinity.
double score_distance(const at::Tensor& a, const at::Tensor& b, double tolerance, bool relative);

// What a load narrows: the linear layers' precision and the tables'.
struct Asked {
  features::Precision precision = features::Precision::kFp32;
  features::TablePrecision tables = features::TablePrecision::kFp32;
  bool tables_written = false;  // by model.yaml or serve --embedding-precision, not following precision
};

// Narrows the optimized forward as `asked` (precision.cpp; model.h says how).
Status serve_narrowed(TorchModel::Impl& impl, const features::ModelSpec& spec, const std::filesystem::path& dir, const Asked& asked,
                      const LoadOptions& options);

// model.pt's embedding tables, as the Python package's export() reads them:
// each emb_<table> parameter, or the weight of an emb_<table> submodule (an
// nn.EmbeddingBag).
struct ModuleTable {
  std::string table;  // model.yaml's name
  at::Tensor weight;
  torch::jit::Module owner;  // holds it as `attribute`
  std::string attribute;
};
std::vector<ModuleTable> embedding_tables(const torch::jit::Module& module);
// model.yaml's quantized_tables read from dir/tables/<name>.rowwise (in
// memory that asked for huge pages where `huge_pages`), each checked
// against the module's table and embedding_precision; the module then holds
// a placeholder in each one's place (its fp32 rows, if it had them, freed).
// Refuses a module table that is a placeholder (one value seen as its
// shape: shipped apart) that quantized_tables does not list.
Result<std::vector<graph::ShippedTable>> read_shipped_tables(torch::jit::Module& module, const features::ModelSpec& spec,
                                                      const std::filesystem::path& dir, bool huge_pages);
// The shipped tables put in a fresh optimized forward (refused without one).
Status serve_shipped(TorchModel::Impl& impl, const std::filesystem::path& dir, const LoadOptions& options);
// What precision bf16 or int8 would run on here: "avx512_bf16", or "none (why)".
std::string instructions_summary(kernels::LinearPrecision chains);

}  // namespace numaserve::model
