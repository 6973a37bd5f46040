#pragma once
// The service's Prometheus metrics (text exposition format 0.0.4): requests
// by route and status, latency histograms per stage and model, batch sizes,
// and gauges sampled when scraped. Recording is a few atomic adds; the
// histograms have fixed buckets so no request allocates.

#include <array>
#include <atomic>
#include <deque>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <optional>
#include <vector>

#include "feature_store/stats.h"
#include "features/model_spec.h"
#include "numaserve/common/append_only.h"

namespace numaserve::metrics {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // `name{labels,le="..."} n` lines, then _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<std::uint64_t>> counts_;  // one per bound, plus +Inf
  std::atomic<double> sum_{0};
};

// A request's way through its worker: parse the body, query the feature
// store, extract the model's input, wait in the queue, the batch's forward,
// encode the reply; total is from the whole request read to the reply made.
enum class Stage { kParse, kQuery, kExtract, kQueue, kForward, kEncode, kTotal };
inline constexpr std::array<const char*, 7> kStageNames = {"parse",   "query",  "extract", "queue",
                                                           "forward", "encode", "total"};

// One inference worker: its event loop's connections and its forwards.
struct WorkerGauges {
  std::uint64_t connections = 0;       // open now
  std::uint64_t accepted = 0;
  std::uint64_t requests_read = 0;     // read on its connections
  std::uint64_t forwards = 0;
  std::uint64_t forward_rows = 0;
  std::uint64_t forward_requests = 0;  // run in its forwards, its own and others'
  std::uint64_t stolen = 0;            // of those, read by another worker
  double forward_seconds = 0;
  std::size_t queued = 0;
  double busy_share = 0;  // its thread's CPU time over wall time, the last seconds (http/busy.h)
};

// One priority level (serve --priority-levels), over the workers.
struct LevelGauges {
  std::size_t queued = 0;
  std::uint64_t answered = 0, refused = 0;
  double wait_seconds = 0;  // the answered requests' time in the queue
};

// The HTTP side: connections closed or refused before a request reached a route.
struct TransportGauges {
  std::uint64_t idle_closed = 0;
  std::uint64_t timed_out = 0;
  std::uint64_t rejected = 0;
  std::uint64_t cut = 0;
  std::uint64_t retired = 0;
  std::uint64_t refused = 0;
  std::uint64_t max_connections = 0;
};

// One model version served now.
struct VersionGauges {
  std::string model, version;
  bool is_default = false;  // what a request naming no version gets
  std::size_t weight_bytes = 0;
  std::map<unsigned, std::uint64_t> bytes_per_node;  // its weights' resident pages
  std::string precision_requested = "fp32", precision_served = "fp32", precision_tables = "fp32";  // api::PrecisionReport's
  // api::LinearReport's: its linear layers on numaserve's kernels (their path) and on LibTorch.
  std::string linear_kernels;
  int linear_own = 0, linear_libtorch = 0;
};

// Values read at scrape time.
struct Gauges {
  std::size_t queue_depth = 0;
  std::size_t in_flight = 0;
  std::size_t busy_workers = 0;
  bool ready = false;
  std::map<std::string, std::string> placement;  // labels of numaserve_placement_info
  std::map<std::string, std::string> blas;       // labels of numaserve_blas_info (blas::Report's)
  std::map<std::string, double> model_local_ratio;  // model -> its default version's share of weight pages on the service's nodes
  std::vector<VersionGauges> versions;
  std::map<std::string, std::size_t> threads;       // kind -> count
  std::vector<WorkerGauges> workers;
  std::vector<LevelGauges> levels;  // [0] is priority 1
  TransportGauges transport;
  std::optional<feature_store::StoreStats> feature_store;  // a networked store's, when there is one
};

class Metrics {
 public:
  explicit Metrics(const std::vector<std::string>& models, std::size_t priority_levels = 1);
  ~Metrics();
  // A model served from now on (added after start); once per name.
  void add_model(const std::string& model);

  void count_request(const std::string& route, int status);
  // A gRPC call answered: its method ("/numaserve.v1.Ranking/Predict") and
  // status ("OK", "INVALID_ARGUMENT", ...).
  void count_grpc_call(const std::string& method, const std::string& code);
  // A reply scored by `version` of `model`.
  void count_version(const std::string& model, const std::string& version);
  // `model` must be one given to the constructor or add_model; others are dropped.
  void observe(Stage stage, const std::string& model, double seconds);
  void observe_batch(std::size_t items, std::size_t requests);
  // An answered request of level `priority` (1..priority_levels): its time
  // from read whole to its reply made, whatever its model.
  void observe_level(std::size_t priority, double seconds);
  // One request's round trip to a networked feature store, failed or not.
  void observe_feature_store(double seconds) { feature_store_.observe(seconds); }
  // A version's load by the repository's manager: `result` "ok" or why it
  // was refused ("memory", "load", "name", "store", "contract", "warmup"); the
  // seconds of a load that served.
  void count_load(const std::string& model, const std::string& result);
  void observe_load(const std::string& model, double load_seconds, double warmup_seconds);

  std::string render(const Gauges& gauges) const;

 private:
  mutable std::mutex requests_mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> grpc_calls_;  // under requests_mutex_
  std::map<std::pair<std::string, std::string>, std::uint64_t> version_requests_;  // under requests_mutex_
  // Per model: a histogram per stage, the load and warm-up times. Added,
  // never removed, so the workers look theirs up without a lock.
  struct PerModel;
  PerModel* find(const std::string& model) const;
  std::mutex adding_;
  AppendOnly<PerModel, features::kMaxModels> models_;
  Histogram batch_items_;
  Histogram batch_requests_;
  Histogram feature_store_;
  std::deque<Histogram> levels_;  // [0] is priority 1
  std::map<std::pair<std::string, std::string>, std::uint64_t> loads_;  // under requests_mutex_
};

}  // namespace numaserve::metrics
