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
struct GraphReport {
  // "off" (--graph-optimizations off), "optimized" (at least one rewrite
  // runs), "unchanged" (nothing matched: the model runs as written) or
  // "failed" (the rewritten graph could not be made or did not match the
  // original's scores: the model runs as written; `reason` says why).
  std::string state = "off";
  std::string reason;
  std::vector<GraphRewrite> rewrites;
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
};

}  // namespace numaserve::api
