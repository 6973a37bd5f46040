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

#include "model/graph.h"
#include "model/model.h"

namespace numaserve::model {

struct TorchModel::Impl {
  torch::jit::Module module;                    // as written; its parameters are the weights
  std::optional<torch::jit::Module> optimized;  // sharing them, when a rewrite applied and checked out
  api::GraphReport report;
  api::PrecisionReport precision;
  LinearLayers linear;  // of the running forward

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
Status serve_narrowed(const torch::jit::Module& module, std::optional<torch::jit::Module>& optimized, api::GraphReport& graph,
                      api::PrecisionReport& report, const features::ModelSpec& spec, const std::filesystem::path& dir,
                      const Asked& asked, const LoadOptions& options);
// What precision bf16 or int8 would run on here: "avx512_bf16", or "none (why)".
std::string instructions_summary(kernels::LinearPrecision chains);

}  // namespace numaserve::model
