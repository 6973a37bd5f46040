#pragma once
// A loaded model: model.pt (TorchScript) + model.yaml (the feature contract),
// the service's api::Model run by LibTorch. This header is torch-free on
// purpose — everything above service/model/ sees plain vectors
// (features::Batch in, one float per row out); only model.cpp and
// demo_models.cpp include LibTorch.
//
// The forward contract of model.pt:
//   def forward(self, dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor
// dense is float32 [N, D] (model.yaml's numeric features in order), and
// indices[k] / offsets[k] are the int64 embedding bag of the k-th id or
// id-list feature (offsets: one start per row). It returns N scores
// ([N] or [N, 1]). A parameter named emb_<table>, when present, must have
// as many rows as model.yaml's tables.<table> — checked at load, since a
// mismatch would send hashed ids past the end of the table.
//
// With graph optimizations (the default) the forward that runs is a frozen
// copy whose hot patterns are fused ops (graph.h), sharing the weights; it
// is used only after it gave the original's scores on random rows
// (kScoreTolerance), and the report says what was rewritten and what not.
//
// Below fp32 (model.yaml's `precision` and `embedding_precision`, or
// LoadOptions'): the optimized forward's linear layers become bf16 or int8
// where the CPU multiplies them in hardware (kernels::bf16_support,
// int8_support; elsewhere the load is refused naming what the CPU lacks, or
// under -if-available runs fp32 and says so: precision()), and its
// embedding tables bf16 or rowwise int8 / int4 (graph.h narrow; any CPU).
// The narrowed forward serves only if its scores stay within the model's
// precision_max_drift of fp32's on random rows (kDriftCheckRows); the fp32
// copies of what was narrowed are released as it goes: an int8 table holds
// about a quarter of the memory, and the load's peak stays the fp32 size.

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/model.h"
#include "drift/drift.h"
#include "features/extract.h"
#include "features/model_spec.h"
#include "numaserve/common/result.h"
#include "numa/numa.h"

namespace numaserve::model {

struct LoadOptions {
  bool graph_optimizations = true;
  // The version a model repository's directory names (DIR/<model>/<version>/),
  // which is the version served; empty: model.yaml's.
  std::string version;
  // The share of one CPU the load may take (CpuPacer: reading and parsing
  // model.pt, the graph rewrites): a reload's --reload-cpu-share; 1
  // (start-up) as fast as it can.
  double cpu_share = 1.0;
  // Weights of at least kHugePageWeightBytes moved into memory that asked
  // the kernel for transparent huge pages (madvise mode): an embedding
  // table read at random then costs a TLB miss per 2 MiB, not per 4 KiB.
  bool huge_pages = true;
  // serve --precision / check-model --precision; unset: model.yaml's. Set,
  // it stands for embedding_precision too unless that is set as well.
  std::optional<features::Precision> precision;
  std::optional<features::TablePrecision> embedding_precision;
  // The linear layers on numaserve's kernels (graph.h linear_chains); false
  // leaves them to LibTorch and its BLAS, for the benchmark's comparison.
  bool linear_kernels = true;
};
inline constexpr std::size_t kHugePageWeightBytes = 4u << 20;

// How far an optimized forward's scores may stray from the original's at
// load: the fused ops sum in another order than ATen's BLAS calls, so
// scores differ in their last bits; beyond this, the load keeps the
// original. Relative to the score, and absolute below a magnitude of 1.
// (The tests hold each forward to what the arithmetic allows instead:
// TorchModel::rounding_bound.)
constexpr double kScoreTolerance = 1e-5;

// The rows of random requests a narrowed forward is compared with fp32 on at load.
inline constexpr std::size_t kDriftCheckRows = 1024;
// The rows the linear chains are timed on in each precision at load
// (-if-available serves bf16 or int8 only where it is the faster).
inline constexpr std::int64_t kTimingRows = 256;

class TorchModel final : public api::Model {
 public:
  ~TorchModel() override;
  TorchModel(const TorchModel&) = delete;
  TorchModel& operator=(const TorchModel&) = delete;

  // Reads dir/model.yaml and dir/model.pt. The calling thread's CPU and
  // memory binding decide where the weights land (they are written by it).
  static Result<std::unique_ptr<TorchModel>> load(const std::filesystem::path& dir, const LoadOptions& options = {});

  const features::ModelSpec& spec() const override { return spec_; }
  const std::filesystem::path& dir() const { return dir_; }

  Result<std::vector<float>> forward(const features::Batch& batch) const override;
  Status warm_up(std::size_t rows, unsigned rounds) const override;
  std::vector<numa::MemoryRange> weights() const override;
  std::size_t weight_bytes() const override;
  api::GraphReport graph_report() const override;
  api::PrecisionReport precision() const override;

  // The scores of the model as written, not optimized: for the tests and
  // the benchmark's comparison. A model served in bf16 has released its
  // fp32 weights: an error.
  Result<std::vector<float>> forward_as_written(const features::Batch& batch) const;
  // The running forward's fused ops by kind ("numaserve::embedding_bags" -> 1).
  std::map<std::string, int> fused_ops() const;

  // The work one forward of `batch` asks of the machine, counted from the
  // ops the running forward calls, for the benchmark's roofline: the
  // multiply-adds of its matrix products and of the dot products it keeps
  // (a fused interaction computes only its pairs; a bmm all of them), and
  // the bytes its embedding bags gather.
  struct Workload {
    double multiply_adds = 0;
    double gathered_bytes = 0;
    // The lengths of the sums each counted op reduces (a linear layer's
    // inputs, a product's inner dimension, the longest bag), added up.
    double reduction_length = 0;
  };
  Result<Workload> workload(const features::Batch& batch) const;

  // For each row of `batch`, a bound on |score - exact score| of an fp32
  // forward of this model that sums in any order, from the arithmetic: the
  // model as written run with every weight and input replaced by its
  // magnitude (sigmoid by its slope bound 1/4) gives each row's sum of
  // the magnitudes the rounding errors scale with, M; the forward's
  // reductions add up to L terms; an error relative to M grows by at most
  // gamma_L = L u / (1 - L u) (u = 2^-24), doubled for the one bilinear
  // stage (the interaction) a path of a ranking model crosses; plus 16 units
  // of the score's last place for the elementwise functions. For the tests:
  // it copies every weight.
  Result<std::vector<double>> rounding_bound(const features::Batch& batch) const;

  // What serve would only find per request: forward's signature (field
  // "forward") and, on `rows` default rows, that it runs and returns one
  // finite float score per row ([N] or [N, 1]; field "output"). Errors name
  // model.pt.
  Status check(std::size_t rows) const;

  // Named here, defined in torch_model.h: only model/'s LibTorch files see
  // inside (precision.cpp narrows it).
  struct Impl;

 private:
  TorchModel(std::filesystem::path dir, features::ModelSpec spec, std::unique_ptr<Impl> impl);
  std::filesystem::path dir_;
  features::ModelSpec spec_;
  std::unique_ptr<Impl> impl_;
};

// `numaserve check-model DIR`: the directory loaded as serve loads it, then
// check()ed, and what it costs a replica.
struct ModelCheck {
  std::string name, version;
  api::GraphReport graph;
  std::string signature;          // forward's, as TorchScript prints it
  std::size_t rows = 0;           // of the synthetic forward
  std::size_t weight_bytes = 0;   // parameters and buffers
  std::size_t resident_bytes = 0; // the process's resident memory grown by the load and the forward
  api::PrecisionReport precision;
};
Result<ModelCheck> check_model(const std::filesystem::path& dir, const LoadOptions& options = {}, std::size_t rows = 16);

// `numaserve check-model --precision int8 --requests FILE`: the model loaded
// in fp32 and as `options` ask, each request's rows
// scored by both; `labels` (empty, or one list per request) add AUC and
// log-loss. A request whose labels do not match its rows is an error.
Result<drift::Report> precision_drift(const std::filesystem::path& dir, LoadOptions options,
                                      const std::vector<features::Batch>& requests,
                                      const std::vector<std::vector<float>>& labels);

// The intra-op thread count of the calling thread's LibTorch (OpenMP) pool.
// Each inference worker calls it once, after pinning itself, so its OpenMP
// team is created inside its CPUs.
void set_intra_op_threads(unsigned threads);

// What LibTorch was built with and what the CPU gives it, for the startup
// summary: "LibTorch 1.13.0 (OpenMP), BLAS openblas-openmp core Cooperlake,
// fused kernels avx512, bf16 avx512_bf16, int8 avx512_vnni".
std::string runtime_summary();
// The process's BLAS and its core: "openblas-openmp core SkylakeX (corrected from Prescott)".
std::string blas_summary();

}  // namespace numaserve::model
