#pragma once
// A model as the service sees it: a feature contract (model.yaml) and a
// forward from extracted rows to one score per row. service/model/
// implements it with LibTorch; the API's tests with a fake, so routes,
// status codes, readiness and the handlers are tested without torch.

#include <cstddef>
#include <string>
#include <vector>

#include "features/extract.h"
#include "features/model_spec.h"
#include "numa/numa.h"
#include "numaserve/common/result.h"

namespace numaserve::api {

// What the load did to a model's graph (service/model/graph.cpp): each
// rewrite, where it applied and why each candidate it left alone did not
// match, so a user whose model was not sped up can see why.
struct GraphRewrite {
  std::string name;                      // "dot_interaction", "embedding_bags"
  std::vector<std::string> applied;      // one line per site rewritten
  std::vector<std::string> not_applied;  // one line per candidate left alone, with the reason
};
// Where a model's linear layers run: on numaserve's kernels (the linear
// chains: `kernels` is their path, "avx512", "avx2", "portable" or
// "avx512_bf16") or on LibTorch and the process's BLAS (`blas`: its core,
// and whether it was corrected).
struct LinearReport {
  int own = 0;          // layers on numaserve's kernels
  std::string kernels;  // their path; empty where there are none
  int libtorch = 0;     // layers left to LibTorch
  std::string blas;     // "openblas-openmp core Cooperlake"
};
struct GraphReport {
  // "off" (--graph-optimizations off), "optimized" (at least one rewrite
  // runs), "unchanged" (nothing matched: the model runs as written) or
  // "failed" (the rewritten graph could not be made or did not match the
  // original's scores: the model runs as written; `reason` says why).
  std::string state = "off";
  std::string reason;
  std::vector<GraphRewrite> rewrites;
  LinearReport linear;
};

// What the load did with a model's precision (model.yaml's `precision` and
// `embedding_precision`, or serve's options): what was asked, what runs,
// and how far its scores strayed from fp32's on the load's check rows.
struct PrecisionReport {
  std::string requested = "fp32";  // the linear layers': fp32, bf16, int8, bf16-if-available, int8-if-available
  std::string served = "fp32";     // the linear layers run in: fp32, bf16 or int8
  std::string tables = "fp32";     // the embedding tables are held in: fp32, bf16, int8 or int4
  std::string reason;              // why a narrower precision was asked and fp32 runs; empty otherwise
  std::string instructions;        // bf16 / int8 layers: the CPU's instructions ("avx512_bf16", "avx512_vnni")
  double max_drift = 0;            // narrowed: max |score - fp32 score| on the check rows
  double drift_bound = 0;          // narrowed: the bound it was held to
  // -if-available: the linear chains' time per forward of the load's timing
  // rows in fp32 and in the precision asked, measured at load (0: not
  // measured); that precision is served only where it is the faster.
  double fp32_us = 0, candidate_us = 0;
  bool narrowed() const { return served != "fp32" || tables != "fp32"; }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const features::ModelSpec& spec() const = 0;
  // Thread-safe: many workers may run the same model at once.
  virtual Result<std::vector<float>> forward(const features::Batch& batch) const = 0;
  // Runs `rounds` forwards of `rows` default rows, so allocator pools and
  // lazily built kernels are warm before the first request.
  virtual Status warm_up(std::size_t rows, unsigned rounds) const = 0;
  // Where the weights live, for the page-locality report.
  virtual std::vector<numa::MemoryRange> weights() const = 0;
  virtual std::size_t weight_bytes() const = 0;
  virtual GraphReport graph_report() const = 0;
  virtual PrecisionReport precision() const = 0;
};

}  // namespace numaserve::api
