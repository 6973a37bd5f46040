#pragma once
// The service: its models, feature store, item caches, batches, metrics and
// readiness, behind the transport's Handler interface. Each inference
// worker is an event loop of the HTTP server (http/server.h) that calls in
// here on its own pinned thread. Where a request goes:
//   routes.cpp      the route table and the one error boundary
//   predict.cpp     POST /predict: parse -> query -> extract -> batch -> forward -> reply
//   v2.cpp          the KServe v2 routes (metadata, health, infer)
//   operations.cpp  /healthz, /readyz, /metrics, /placement
//   errors.cpp      Error::Code -> HTTP status and JSON body
//
// Life cycle: construct -> http::Server::start(service): each worker pins
// itself (on_loop_start) and warms every model up a forward per turn while
// its loop already answers /healthz -> wait_until_warm() -> ready ->
// begin_drain() on SIGTERM (readiness false, requests still answered) ->
// http::Server::stop() answers what was read and ends the loops.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/config.h"
#include "batching/batcher.h"
#include "features/feature_store.h"
#include "features/remote_store.h"
#include "http/message.h"
#include "http/predict.h"
#include "http/server.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "numaserve/common/placement.h"
#include "numa/numa.h"
#include "threads/threads.h"

namespace numaserve::api {

// What start-up decided and found, for /placement, /metrics and the log.
struct PlacementReport {
  threads::ThreadPlan plan;
  std::optional<CgroupPlacement> cgroup;
  numa::MemoryPolicyOutcome memory_policy;
  std::string runtime;   // "LibTorch 1.13.1 (OpenMP), BLAS openblas-openmp"
  std::string instance;  // who answers: host name and pid (and worker, under a supervisor)
};

// The {name} and {version} segments of a matched path.
struct PathParams {
  std::string name;
  std::string version;
};

// One request on its way through a route.
struct Call {
  http::Request request;
  PathParams params;
  std::size_t worker = 0;     // whose loop read it
  std::string_view route;     // the route's metrics label
  http::Responder responder;  // taken by a route that answers later
};

// A route's answer: an error (errors.cpp makes the reply), a reply now, or
// nothing — the route took the responder and answers when its batch ran.
using Answer = Result<std::optional<http::Reply>>;

class Service final : public http::Handler {
 public:
  // `transport` is read for /metrics only. With a `remote` store (Redis),
  // requests query it instead of `store`, each on its worker's loop.
  Service(ServiceConfig config, PlacementReport placement, std::vector<std::unique_ptr<model::Model>> models,
          std::unique_ptr<features::FeatureStore> store, const http::Server& transport,
          std::unique_ptr<features::RemoteStore> remote = nullptr);
  ~Service() override;
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // http::Handler, on the workers' threads.
  void on_loop_start(std::size_t worker) override;
  void on_request(std::size_t worker, http::Request&& request, http::Responder responder) override;
  http::Turn on_turn(std::size_t worker) override;

  // Blocks until every worker has pinned itself and warmed every model up;
  // then the service is ready. The error is the first warm-up failure.
  Status wait_until_warm();
  void open_group();   // the supervisor says every worker is warm
  void begin_drain();  // readiness goes false; requests are still served

  bool ready() const { return ready_.load(); }
  std::string placement_json() const;
  // One line for the log: cpus, mems, nodes, threads, BLAS, models, locality.
  std::string startup_summary() const;

  // The routes (routes.cpp lists them).
  Answer predict(Call& call);
  Answer healthz(Call& call);
  Answer readyz(Call& call);
  Answer metrics(Call& call);
  Answer placement(Call& call);
  Answer v2_server(Call& call);
  Answer v2_live(Call& call);
  Answer v2_ready(Call& call);
  Answer v2_model(Call& call);
  Answer v2_model_ready(Call& call);
  Answer v2_infer(Call& call);

 private:
  // Counts a reply and sends it; from any worker's thread.
  void finish(std::string_view route, http::Responder& responder, http::Reply reply);
  // The one error boundary (routes.cpp): runs a route's handling of `call`
  // and sends its reply, its error's reply, or a 500 for an exception;
  // nothing when the route took the responder to answer later.
  void respond(Call& call, const std::function<Answer()>& handle);
  // The model a request or a path names (and the version it asks for), or
  // the default: the first one.
  Result<std::size_t> find_model(const std::optional<std::string>& name, const std::string& version = {}) const;
  // Queues `batch` for the calling worker's next forward and takes the
  // call's responder; `encode` makes the reply from the scores, on the
  // worker that ran the forward. `start`: when the request was taken up.
  using Encoder = std::function<http::Reply(std::vector<float>&& scores)>;
  void enqueue(Call& call, std::size_t model, features::Batch batch, batching::Clock::time_point start,
               Encoder encode);
  // /predict after the feature query: extract, then queue for a forward.
  struct Predicting;
  // With `remember`, the items it fetched go into `cache` (the worker's).
  Answer extract_and_enqueue(Call& call, Predicting& p, const features::StoredFeatures& stored,
                             features::ItemCache* cache, bool remember);
  // /predict with a networked store: the items this worker's cache holds,
  // the rest asked of the store, and its answer, on the worker's loop.
  struct Flight;
  void fetch(const std::shared_ptr<Flight>& flight);
  void fetched(const std::shared_ptr<Flight>& flight, Result<features::Fetched>&& got);
  // This worker's cache of fetched items for a model; null when off.
  features::ItemCache* fetched_items(std::size_t worker, std::size_t model);
  struct Pending;
  void complete(Pending& pending, batching::Outcome&& outcome);
  void warm_up_step(std::size_t worker);
  void worker_warm(std::optional<Error> failure);
  std::string not_ready_reason() const;
  void update_ready();
  metrics::Gauges gauges() const;
  std::map<std::string, double> model_locality() const;

  ServiceConfig config_;
  PlacementReport placement_;
  std::vector<std::unique_ptr<model::Model>> models_;
  std::unique_ptr<features::FeatureStore> store_;
  std::unique_ptr<features::RemoteStore> remote_;
  std::vector<std::optional<features::ItemCache>> item_caches_;  // per model
  // With a networked store: per worker, per model, each used on its worker's thread only.
  std::vector<std::vector<features::ItemCache>> fetched_items_;
  std::atomic<std::uint64_t> cache_hits_{0}, cache_misses_{0};
  const http::Server& transport_;
  // Ids given to requests that bring none, "ns-<pid>-<n>": the pid keeps
  // the supervisor's replicas apart; read once, not a syscall per request.
  const std::string request_id_prefix_;
  metrics::Metrics metrics_;
  batching::Batcher batcher_;

  // Warm-up, a forward per turn of each worker's loop (workers_ entries are
  // their own thread's).
  struct WorkerState {
    std::size_t warmup_forwards_left = 0;
  };
  std::vector<WorkerState> workers_;
  std::mutex warm_mutex_;
  std::condition_variable warm_cv_;
  std::size_t warm_workers_ = 0;
  std::optional<Error> warm_error_;

  std::atomic<bool> ready_{false};
  std::atomic<bool> warm_{false};
  std::atomic<bool> group_open_{false};
  std::atomic<bool> draining_{false};
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<std::uint64_t> next_request_id_{1};
};

}  // namespace numaserve::api
