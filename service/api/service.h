#pragma once
// The service's routes and state: POST /predict, the KServe v2 routes,
// /healthz, /readyz, /metrics, /placement. It owns the models, the feature
// store, the inference workers and the metrics; the HTTP transport hands it
// plain requests (http/server.h), so everything here is tested through
// handle() as well as over a real socket.
//
// Life cycle: construct (workers start, pin themselves, warm every model
// up) -> wait_until_warm() -> ready -> begin_drain() on SIGTERM (readiness
// false, requests still answered) -> the server stops -> stop_workers().

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "batching/scheduler.h"
#include "features/feature_store.h"
#include "http/predict.h"
#include "http/server.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "numaserve/common/placement.h"
#include "placement/placement.h"

namespace numaserve::api {

// What start-up decided and found, for /placement, /metrics and the log.
struct PlacementReport {
  placement::ThreadPlan plan;
  std::optional<CgroupPlacement> cgroup;
  placement::MemoryPolicyOutcome memory_policy;
  std::string runtime;   // "LibTorch 1.13.1 (OpenMP), BLAS openblas-openmp"
  std::string instance;  // who answers: host name and pid (and worker, under a supervisor)
};

struct ServiceConfig {
  http::RequestLimits limits;
  batching::SchedulerConfig scheduler;  // workers come from the plan
  unsigned warmup_rounds = 3;
  std::size_t warmup_rows = 64;
  std::string version;  // numaserve's, for GET /v2
  // Under the supervisor: stay not ready after warm-up until open_group(),
  // so a group sharing one port turns ready together.
  bool wait_for_group = false;
};

class Service {
 public:
  Service(ServiceConfig config, PlacementReport placement, std::vector<std::unique_ptr<model::Model>> models,
          std::unique_ptr<features::FeatureStore> store);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Blocks until every worker has pinned itself and warmed every model up;
  // then the service is ready. The error is the first warm-up failure.
  Status wait_until_warm();

  http::Reply handle(const http::Request& request);

  void open_group();      // the supervisor says every worker is warm
  void begin_drain();     // readiness goes false; requests are still served
  void stop_workers();    // after the HTTP server stopped: finishes queued work

  bool ready() const { return ready_.load(); }
  std::string placement_json() const;
  // One line for the log: cpus, mems, nodes, threads, BLAS, models, locality.
  std::string startup_summary() const;

 private:
  http::Reply predict(const http::Request& request);
  http::Reply infer(std::size_t model, const http::Request& request);
  // Queues a batch for model `index` and waits; the reply is the 503/500 to send.
  tl::expected<std::vector<float>, http::Reply> run(std::size_t index, features::Batch batch);
  http::Reply route(const http::Request& request, std::string& route_name);
  std::optional<std::size_t> find_model(const std::string& name) const;
  void worker_start(std::size_t worker);
  metrics::Gauges gauges() const;
  std::map<std::string, double> model_locality() const;

  ServiceConfig config_;
  PlacementReport placement_;
  std::vector<std::unique_ptr<model::Model>> models_;
  std::unique_ptr<features::FeatureStore> store_;
  std::vector<std::optional<features::ItemCache>> item_caches_;  // per model
  // Ids given to requests that bring none, "ns-<pid>-<n>": the pid keeps
  // the supervisor's replicas apart; read once, not a syscall per request.
  const std::string request_id_prefix_;
  metrics::Metrics metrics_;

  std::mutex warm_mutex_;
  std::condition_variable warm_cv_;
  std::size_t warm_workers_ = 0;
  std::optional<Error> warm_error_;

  void update_ready();
  std::atomic<bool> ready_{false};
  std::atomic<bool> warm_{false};
  std::atomic<bool> group_open_{false};
  std::atomic<bool> draining_{false};
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<std::uint64_t> next_request_id_{1};
  std::unique_ptr<batching::Scheduler> scheduler_;  // last: its workers use everything above
};

}  // namespace numaserve::api
