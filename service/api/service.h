#pragma once
// What every route shares: the models, the feature store, the batches, the
// metrics and readiness, and what a request's way through them needs
// (admission, the model a request names, the queue, the one place a reply
// is counted and sent). The routes are in router.cpp, each handler in its
// own file:
//   predict.cpp     POST /predict: admit -> parse -> resolve the model ->
//                   fetch -> extract -> enqueue -> (forward) -> encode
//   v2.cpp          the KServe v2 routes (metadata, health, infer)
//   operations.cpp  /healthz, /readyz, /metrics, /placement
//
// Life cycle: construct -> the transport starts its workers: each pins
// itself (start_worker) and warms every model up a forward per turn while
// its loop already answers /healthz -> readiness().wait_until_warm() ->
// ready -> readiness().begin_drain() on SIGTERM (requests still answered)
// -> the transport answers what was read and ends the workers.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/call.h"
#include "api/config.h"
#include "api/model.h"
#include "api/readiness.h"
#include "batching/batcher.h"
#include "codec/scheduling.h"
#include "feature_store/store.h"
#include "lifecycle/control.h"
#include "metrics/metrics.h"
#include "numa/numa.h"
#include "numaserve/common/placement.h"
#include "threads/threads.h"

namespace numaserve::api {

// What start-up decided and found, for /placement, /metrics and the log.
struct PlacementReport {
  threads::ThreadPlan plan;
  std::optional<CgroupPlacement> cgroup;
  numa::MemoryPolicyOutcome memory_policy;
  std::string runtime;   // "LibTorch 1.13.1 (OpenMP), BLAS openblas-openmp"
  std::string instance;  // who answers: host name and pid (and replica, under a supervisor)
};

// What the service is made of: what start-up decided and loaded.
struct Parts {
  ServiceConfig config;
  PlacementReport placement;
  // Every version served at start; the first one's name is the default
  // model, and each name's first version sets its feature contract.
  std::vector<std::unique_ptr<Model>> models;
  std::unique_ptr<feature_store::FeatureStore> store;
  // The model runtime's setup of a worker's thread, after it pinned itself
  // (LibTorch: its intra-op pool, created inside the worker's CPUs).
  std::function<void(unsigned intra_op_threads)> prepare_worker_thread;
  // The transport's counters into /metrics' gauges (its per-worker
  // connections and its refusals), read at scrape time.
  std::function<void(metrics::Gauges&)> transport_gauges;
  // Gives a worker a turn now, from any thread (the transport's wake).
  std::function<void(std::size_t worker)> wake_worker;
};

class Service {
 public:
  // An error when its model table refuses one of parts.models (a version
  // repeated, or one whose feature contract differs from its name's first).
  static Result<std::unique_ptr<Service>> create(Parts parts);
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // The transport's calls, on each worker's own thread.
  void start_worker(std::size_t worker);
  Turn turn(std::size_t worker);
  bool turn_due(std::size_t worker) const { return batcher_.turn_due(worker); }

  const ServiceConfig& config() const { return config_; }
  lifecycle::ModelTable& models() { return models_; }
  const lifecycle::ModelTable& models() const { return models_; }

  feature_store::FeatureStore& store() { return *store_; }
  metrics::Metrics& metrics() { return metrics_; }
  Readiness& readiness() { return readiness_; }
  const Readiness& readiness() const { return readiness_; }
  // /readyz: warm, not draining, the group open, and every model serving
  // a version (but those an operator unloaded). 503 naming what is not.
  Status ready() const;

  // The repository's manager, when there is one (--model-repository); set
  // before the transport starts.
  void attach(lifecycle::RepositoryControl& control) { repository_ = &control; }
  lifecycle::RepositoryControl* repository() const { return repository_; }

  // A model served from now on, added after start (the repository's
  // manager, before its first version is prepared): the feature store
  // builds what it needs for it (the embedded store's item cache), the
  // metrics and the model table take its name. Nothing for a name already
  // served. From one thread at a time, while the workers serve.
  Status add_model(const features::ModelSpec& spec);

  // Warms `version` up on every worker before it is published: each worker
  // runs warmup_rounds forwards of warmup_rows rows, one per turn after
  // that turn's batch, so a reload adds at most one warm-up forward between
  // two batches. `done` is called once, on the last worker to finish, with
  // the first failure if any. From any thread, once the workers serve.
  void warm(lifecycle::HeldVersion version, std::function<void(Status)> done);

  // What the repository's manager acts on (lifecycle/control.h): this
  // service's version table, metrics, add_model and warm.
  lifecycle::ServiceHooks lifecycle_hooks();

  // A request starts: counted in flight until finish().
  void begin_request() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
  // Before a request is parsed: a service still warming up, or a worker
  // whose queue is full or stale, refuses it (503); one whose queue would
  // outlast the call's deadline refuses it as exceeded (504). With
  // priority levels only readiness and the deadline: the rest waits for
  // the request's level (schedule()).
  Status admit(const Call& call);
  // Once parsed: the request's level (its own, else its model's, else the
  // server's default; a model's beyond the levels is the lowest) and its
  // own timeout into `call` — 400 naming the parameter for a level outside
  // 1..levels, a timeout below 0 or above its level's; a timeout is kept
  // only where the level allows an override (Triton's way). With several
  // levels, the admission at its level.
  Status schedule(Call& call, const codec::Scheduling& scheduling, const features::ModelSpec& model);
  // The version a request names (ModelTable::resolve), held to its reply.
  Result<lifecycle::HeldVersion> find_model(const std::optional<std::string>& name, const std::string& version = {}) const {
    return models_.resolve(name, version);
  }
  // The request's own id, or one made: "ns-<pid>-<n>".
  std::string request_id(std::string given);
  // Queues `batch` for the calling worker's next forward and takes the
  // call's responder; `encode` makes the reply from the scores, on the
  // worker that ran the forward. `start`: when the request was taken up.
  using Encoder = std::function<http::Reply(std::vector<float>&& scores)>;
  void enqueue(Call& call, lifecycle::HeldVersion version, features::Batch batch, batching::Clock::time_point start,
               Encoder encode);
  // Counts a reply and sends it; from any worker's thread.
  void finish(std::string_view route, http::Responder& responder, http::Reply reply);

  // For /metrics, /placement and the start-up log.
  metrics::Gauges gauges() const;
  std::string placement_json() const;
  // One line for the log: cpus, mems, nodes, threads, BLAS, models, locality.
  std::string startup_summary() const;

 private:
  Service(Parts parts, std::vector<std::string> model_names);  // the models are create()'s to add
  struct Pending;
  void complete(Pending& pending, batching::Outcome&& outcome);
  void warm_up_step(std::size_t worker);
  struct Warming;
  bool warm_step(std::size_t worker);
  std::map<std::string, double> model_locality() const;

  const ServiceConfig config_;
  const PlacementReport placement_;
  lifecycle::ModelTable models_;
  const std::unique_ptr<feature_store::FeatureStore> store_;
  const std::function<void(unsigned)> prepare_worker_thread_;
  const std::function<void(metrics::Gauges&)> transport_gauges_;
  const std::function<void(std::size_t)> wake_worker_;
  lifecycle::RepositoryControl* repository_ = nullptr;
  // Ids given to requests that bring none, "ns-<pid>-<n>": the pid keeps
  // the supervisor's replicas apart; read once, not a syscall per request.
  const std::string request_id_prefix_;
  std::atomic<std::uint64_t> next_request_id_{1};
  std::atomic<std::size_t> in_flight_{0};
  metrics::Metrics metrics_;
  batching::Batcher batcher_;
  Readiness readiness_;
  // Warm-up forwards each worker has left, one per turn; each entry its own worker's.
  std::vector<std::size_t> warmup_left_;
  // Versions to warm before they are published, per worker.
  struct WarmQueue {
    std::mutex mutex;
    std::deque<std::pair<std::shared_ptr<Warming>, unsigned>> tasks;  // and rounds left on this worker
    std::atomic<bool> pending{false};
  };
  std::deque<WarmQueue> warm_queues_;
};

}  // namespace numaserve::api
