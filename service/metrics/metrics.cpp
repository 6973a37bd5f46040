#include "metrics/metrics.h"

#include <algorithm>

#include "numaserve/common/prometheus.h"

namespace numaserve::metrics {
namespace {

using prometheus::TextWriter;

// Latency buckets from 50 µs to 10 s: forward of one small batch sits near
// the bottom, a queue under overload near the top.
std::vector<double> latency_buckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

// A version's load and warm-up: from a small model in page cache to many GiB from disk.
std::vector<double> load_buckets() { return {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}; }

std::vector<double> powers_of_two(double last) {
  std::vector<double> out;
  for (double b = 1; b <= last; b *= 2) out.push_back(b);
  return out;
}

// A family per field of T, a sample per element, labelled `label`: the
// element's index plus `first`.
template <typename T>
struct Family {
  const char* name;
  const char* type;
  const char* help;
  double (*value)(const T&);
};

template <typename T, std::size_t N>
void render_families(std::string& out, const Family<T> (&families)[N], const std::vector<T>& values, const char* label,
                     std::size_t first) {
  TextWriter text(out);
  for (const auto& family : families) {
    text.family(family.name, family.type, family.help);
    for (std::size_t i = 0; i < values.size(); ++i) {
      text.sample(family.name, family.value(values[i]), prometheus::label(label, std::to_string(i + first)));
    }
  }
}

// Per worker: how evenly connections and forwards spread, and how much
// work idle workers took from busy ones.
void render_workers(std::string& out, const std::vector<WorkerGauges>& workers) {
  static const Family<WorkerGauges> kFamilies[] = {
      {"numaserve_worker_connections", "gauge", "Open connections owned by the worker's event loop.",
       [](const WorkerGauges& w) { return static_cast<double>(w.connections); }},
      {"numaserve_worker_connections_accepted_total", "counter", "Connections handed to the worker's event loop.",
       [](const WorkerGauges& w) { return static_cast<double>(w.accepted); }},
      {"numaserve_worker_requests_read_total", "counter", "Requests read whole on the worker's connections.",
       [](const WorkerGauges& w) { return static_cast<double>(w.requests_read); }},
      {"numaserve_worker_forwards_total", "counter", "Forward calls the worker ran.",
       [](const WorkerGauges& w) { return static_cast<double>(w.forwards); }},
      {"numaserve_worker_forward_rows_total", "counter", "Rows in the worker's forward calls.",
       [](const WorkerGauges& w) { return static_cast<double>(w.forward_rows); }},
      {"numaserve_worker_forward_requests_total", "counter", "Requests answered by the worker's forward calls.",
       [](const WorkerGauges& w) { return static_cast<double>(w.forward_requests); }},
      {"numaserve_worker_stolen_requests_total", "counter",
       "Requests the worker took from another worker's queue while it had nothing to run.",
       [](const WorkerGauges& w) { return static_cast<double>(w.stolen); }},
      {"numaserve_worker_forward_seconds_total", "counter", "Time the worker spent in forward calls.",
       [](const WorkerGauges& w) { return w.forward_seconds; }},
      {"numaserve_worker_queue_depth", "gauge", "Requests waiting in the worker's queue.",
       [](const WorkerGauges& w) { return static_cast<double>(w.queued); }},
      {"numaserve_worker_busy_share", "gauge",
       "The worker thread's CPU time over wall time, averaged over the last seconds.",
       [](const WorkerGauges& w) { return w.busy_share; }},
  };
  render_families(out, kFamilies, workers, "worker", 0);
}

// Per priority level: what waits, what ran, what was refused, how long the
// answered took (`latency`, [0] is priority 1).
void render_levels(std::string& out, const std::vector<LevelGauges>& levels, const std::deque<Histogram>& latency) {
  static const Family<LevelGauges> kFamilies[] = {
      {"numaserve_priority_queued", "gauge", "Requests of the priority level waiting for a forward.",
       [](const LevelGauges& l) { return static_cast<double>(l.queued); }},
      {"numaserve_priority_answered_total", "counter", "Requests of the priority level run in a forward.",
       [](const LevelGauges& l) { return static_cast<double>(l.answered); }},
      {"numaserve_priority_refused_total", "counter",
       "Requests of the priority level refused for load: at admission, past their timeout, or taken over by a higher "
       "level in a full queue.",
       [](const LevelGauges& l) { return static_cast<double>(l.refused); }},
      {"numaserve_priority_wait_seconds_total", "counter",
       "Time the answered requests of the priority level waited in the queue (over answered_total: the mean wait).",
       [](const LevelGauges& l) { return l.wait_seconds; }},
  };
  render_families(out, kFamilies, levels, "priority", 1);
  TextWriter(out).family("numaserve_priority_request_seconds", "histogram",
                         "Time from a request read whole to its reply made, per priority level: its answered requests.");
  for (std::size_t p = 0; p < latency.size(); ++p) {
    latency[p].render(out, "numaserve_priority_request_seconds", prometheus::label("priority", std::to_string(p + 1)));
  }
}

void render_feature_store(std::string& out, const Histogram& latency, const feature_store::StoreStats& s) {
  TextWriter w(out);
  const std::string store = prometheus::label("store", s.store);
  w.family("numaserve_feature_store_seconds", "histogram",
           "A request's feature query round trip to the networked store (failures and timeouts included).");
  latency.render(out, "numaserve_feature_store_seconds", store);
  w.family("numaserve_feature_store_errors_total", "counter",
           "Feature queries that failed, by kind: timeout, disconnected, refused, breaker_open, overloaded, unreadable.");
  for (const auto& [kind, count] : s.errors) w.sample("numaserve_feature_store_errors_total", count, store + "," + prometheus::label("kind", kind));
  w.family("numaserve_feature_store_degraded_total", "counter",
           "Requests answered with model.yaml defaults for what the store failed to give (--on-feature-store-error default).");
  w.sample("numaserve_feature_store_degraded_total", s.degraded, store);
  w.family("numaserve_item_cache_total", "counter", "Items found in the workers' item caches (hit) or asked of the store (miss).");
  w.sample("numaserve_item_cache_total", s.cache_hits, store + "," + prometheus::label("result", "hit"));
  w.sample("numaserve_item_cache_total", s.cache_misses, store + "," + prometheus::label("result", "miss"));
  w.family("numaserve_feature_store_breaker", "gauge",
           "Each worker's circuit breaker: 1 for its current state (closed, open, half_open).");
  auto worker = [&store](std::size_t i) { return store + "," + prometheus::label("worker", std::to_string(i)); };
  for (std::size_t i = 0; i < s.breakers.size(); ++i) {
    for (const char* state : {"closed", "open", "half_open"}) {
      w.sample("numaserve_feature_store_breaker", s.breakers[i] == state ? 1 : 0, worker(i) + "," + prometheus::label("state", state));
    }
  }
  w.family("numaserve_feature_store_connected", "gauge", "1 when the worker's connection to the store is up.");
  for (std::size_t i = 0; i < s.connected.size(); ++i) w.sample("numaserve_feature_store_connected", s.connected[i] ? 1 : 0, worker(i));
  if (s.nodes.empty()) return;  // one server: the families above say it all
  struct NodeFamily {
    const char* name;
    const char* help;
    std::uint64_t feature_store::StoreStats::Node::*count;
  };
  static constexpr NodeFamily kNodeFamilies[] = {
      {"numaserve_feature_store_node_pipelines_total",
       "Pipelines sent to each Redis Cluster node, all workers together: one per request whose keys it serves, and one per redirect.",
       &feature_store::StoreStats::Node::pipelines},
      {"numaserve_feature_store_node_errors_total",
       "Pipelines a Redis Cluster node failed (timeout, disconnected, breaker open...), health-check PINGs it failed, and commands it refused (CLUSTERDOWN, a redirect not followed).",
       &feature_store::StoreStats::Node::errors},
      {"numaserve_feature_store_node_map_refreshes_total", "Slot maps (CLUSTER SLOTS) read from each Redis Cluster node.",
       &feature_store::StoreStats::Node::refreshes},
  };
  for (const auto& family : kNodeFamilies) {
    w.family(family.name, "counter", family.help);
    for (const auto& n : s.nodes) w.sample(family.name, n.*family.count, store + "," + prometheus::label("node", n.node));
  }
  w.family("numaserve_feature_store_redirects_total", "counter",
           "MOVED and ASK redirects each Redis Cluster node answered with: a slot moved (resharding, failover) or moving.");
  for (const auto& n : s.nodes) {
    const std::string node = store + "," + prometheus::label("node", n.node);
    w.sample("numaserve_feature_store_redirects_total", n.moved, node + "," + prometheus::label("kind", "moved"));
    w.sample("numaserve_feature_store_redirects_total", n.ask, node + "," + prometheus::label("kind", "ask"));
  }
}

void render_transport(std::string& out, const TransportGauges& t) {
  TextWriter w(out);
  w.family("numaserve_http_connections_closed_total", "counter",
         "Connections the server closed: idle past the idle timeout, timeout (a header or body not received, or a "
         "reply not taken, in time; 408), rejected (malformed, header or body over the limit; 400, 431, 413), cut "
         "(mid-request when the shutdown grace ended), retired (after a reply at max_connection_requests or "
         "max_connection_age).");
  w.sample("numaserve_http_connections_closed_total", t.idle_closed, "reason=\"idle\"");
  w.sample("numaserve_http_connections_closed_total", t.timed_out, "reason=\"timeout\"");
  w.sample("numaserve_http_connections_closed_total", t.rejected, "reason=\"rejected\"");
  w.sample("numaserve_http_connections_closed_total", t.cut, "reason=\"cut\"");
  w.sample("numaserve_http_connections_closed_total", t.retired, "reason=\"retired\"");
  w.family("numaserve_http_connections_refused_total", "counter",
         "Connections answered 503 and closed because max_connections were open.");
  w.sample("numaserve_http_connections_refused_total", t.refused);
  w.family("numaserve_http_max_connections", "gauge", "The open-connection limit in force.");
  w.sample("numaserve_http_max_connections", t.max_connections);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double value) {
  std::size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  TextWriter w(out);
  const std::string prefix = labels.empty() ? "" : labels + ",";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? prometheus::number(bounds_[i]) : "+Inf";
    w.sample(name + "_bucket", cumulative, prefix + "le=\"" + le + "\"");
  }
  w.sample(name + "_sum", sum_.load(std::memory_order_relaxed), labels);
  w.sample(name + "_count", cumulative, labels);
}

namespace {

// The versions served now.
void render_versions(std::string& out, const Gauges& gauges) {
  TextWriter w(out);
  w.family("numaserve_model_version_served", "gauge",
           "1 for each version served now; default=\"true\" for the one a request naming no version gets.");
  for (const auto& v : gauges.versions) {
    w.sample("numaserve_model_version_served", 1,
             prometheus::label("model", v.model) + "," + prometheus::label("version", v.version) + "," +
                 prometheus::label("default", v.is_default ? "true" : "false"));
  }
  w.family("numaserve_model_version_precision", "gauge",
           "1 for each version served now, labelled with the precision its model asked for, the one its linear layers "
           "run in and the one its embedding tables are held in (requested=\"int8-if-available\", served=\"fp32\": this "
           "CPU has no int8 instructions).");
  for (const auto& v : gauges.versions) {
    w.sample("numaserve_model_version_precision", 1,
             prometheus::label("model", v.model) + "," + prometheus::label("version", v.version) + "," +
                 prometheus::label("requested", v.precision_requested) + "," + prometheus::label("served", v.precision_served) + "," +
                 prometheus::label("tables", v.precision_tables));
  }
  w.family("numaserve_model_version_linear_layers", "gauge",
           "A version's linear layers by where they run: path=\"avx512\", \"avx2\", \"portable\" or \"avx512_bf16\" on "
           "numaserve's kernels, path=\"libtorch\" on LibTorch and the process's BLAS.");
  for (const auto& v : gauges.versions) {
    const std::string labels = prometheus::label("model", v.model) + "," + prometheus::label("version", v.version) + ",";
    if (v.linear_own > 0) w.sample("numaserve_model_version_linear_layers", v.linear_own, labels + prometheus::label("path", v.linear_kernels));
    w.sample("numaserve_model_version_linear_layers", v.linear_libtorch, labels + prometheus::label("path", "libtorch"));
  }
  w.family("numaserve_model_version_weight_bytes", "gauge", "A version's resident weight bytes, by NUMA node.");
  for (const auto& v : gauges.versions) {
    for (const auto& [node, bytes] : v.bytes_per_node) {
      w.sample("numaserve_model_version_weight_bytes", bytes,
               prometheus::label("model", v.model) + "," + prometheus::label("version", v.version) + "," +
                   prometheus::label("node", std::to_string(node)));
    }
  }
}

// The service's state now: queue, workers busy, readiness, threads, placement.
void render_gauges(std::string& out, const Gauges& gauges) {
  TextWriter w(out);
  w.family("numaserve_queue_depth", "gauge", "Requests waiting for an inference worker.");
  w.sample("numaserve_queue_depth", gauges.queue_depth);
  w.family("numaserve_in_flight_requests", "gauge", "Requests being handled.");
  w.sample("numaserve_in_flight_requests", gauges.in_flight);
  w.family("numaserve_busy_workers", "gauge", "Inference workers running a forward.");
  w.sample("numaserve_busy_workers", gauges.busy_workers);
  double busy = 0;
  for (const auto& worker : gauges.workers) busy += worker.busy_share / static_cast<double>(gauges.workers.size());
  w.family("numaserve_saturation", "gauge",
           "How busy the replica is, 0 to 1: its worker threads' mean CPU time over wall time, the last seconds "
           "(about the offered load over the saturation rate; the signal to autoscale on).");
  w.sample("numaserve_saturation", busy);
  w.family("numaserve_ready", "gauge", "1 when warmed up and not draining.");
  w.sample("numaserve_ready", gauges.ready ? 1 : 0);
  w.family("numaserve_threads", "gauge", "Threads by kind.");
  for (const auto& [kind, count] : gauges.threads) {
    w.sample("numaserve_threads", count, prometheus::label("kind", kind));
  }
  w.family("numaserve_placement_info", "gauge", "Where this process runs: cpus, mems, NUMA nodes, threads.");
  std::string labels;
  for (const auto& [key, value] : gauges.placement) {
    labels += (labels.empty() ? "" : ",") + prometheus::label(key, value);
  }
  w.sample("numaserve_placement_info", 1, labels);
  w.family("numaserve_blas_info", "gauge",
           "The BLAS core LibTorch's linear layers run on: core, the library's own choice (chosen; another where it "
           "was below this CPU's and corrected) and the CPU's best (best); warning=\"true\" where it runs below it.");
  labels.clear();
  for (const auto& [key, value] : gauges.blas) labels += (labels.empty() ? "" : ",") + prometheus::label(key, value);
  if (!gauges.blas.empty()) w.sample("numaserve_blas_info", 1, labels);
  w.family("numaserve_model_weights_local_ratio", "gauge",
         "Share of the model's resident weight pages on the NUMA nodes of the service's cpuset.");
  for (const auto& [model, ratio] : gauges.model_local_ratio) {
    w.sample("numaserve_model_weights_local_ratio", ratio, prometheus::label("model", model));
  }
}

}  // namespace

struct Metrics::PerModel {
  explicit PerModel(std::string n) : name(std::move(n)), load(load_buckets()), warmup(load_buckets()) {
    for (std::size_t s = 0; s < kStageNames.size(); ++s) stages.emplace_back(latency_buckets());
  }
  const std::string name;
  std::deque<Histogram> stages;
  Histogram load, warmup;
};

Metrics::Metrics(const std::vector<std::string>& models, std::size_t priority_levels)
    : batch_items_(powers_of_two(8192)), batch_requests_(powers_of_two(256)), feature_store_(latency_buckets()) {
  for (const auto& model : models) add_model(model);
  for (std::size_t p = 0; p < std::max<std::size_t>(priority_levels, 1); ++p) levels_.emplace_back(latency_buckets());
}

Metrics::~Metrics() = default;

void Metrics::add_model(const std::string& model) {
  std::lock_guard lock(adding_);
  if (find(model) == nullptr) (void)models_.push(std::make_unique<PerModel>(model));
}

// A linear search: a service serves a few models, and a string compare per
// model costs what a map's did.
Metrics::PerModel* Metrics::find(const std::string& model) const {
  for (std::size_t m = 0, n = models_.size(); m < n; ++m) {
    if (models_[m].name == model) return &models_[m];
  }
  return nullptr;
}

void Metrics::count_load(const std::string& model, const std::string& result) {
  std::lock_guard lock(requests_mutex_);
  ++loads_[{model, result}];
}

void Metrics::observe_load(const std::string& model, double load_seconds, double warmup_seconds) {
  if (PerModel* m = find(model)) {
    m->load.observe(load_seconds);
    m->warmup.observe(warmup_seconds);
  }
}

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard lock(requests_mutex_);
  ++requests_[{route, status}];
}

void Metrics::count_grpc_call(const std::string& method, const std::string& code) {
  std::lock_guard lock(requests_mutex_);
  ++grpc_calls_[{method, code}];
}

void Metrics::count_version(const std::string& model, const std::string& version) {
  std::lock_guard lock(requests_mutex_);
  ++version_requests_[{model, version}];
}

void Metrics::observe(Stage stage, const std::string& model, double seconds) {
  if (PerModel* m = find(model)) m->stages[static_cast<std::size_t>(stage)].observe(seconds);
}

void Metrics::observe_level(std::size_t priority, double seconds) {
  if (priority >= 1 && priority <= levels_.size()) levels_[priority - 1].observe(seconds);
}

void Metrics::observe_batch(std::size_t items, std::size_t requests) {
  batch_items_.observe(static_cast<double>(items));
  batch_requests_.observe(static_cast<double>(requests));
}

std::string Metrics::render(const Gauges& gauges) const {
  std::string out;
  TextWriter w(out);
  w.family("numaserve_requests_total", "counter", "HTTP requests answered, by route and status code.");
  {
    std::lock_guard lock(requests_mutex_);
    for (const auto& [key, count] : requests_) {
      w.sample("numaserve_requests_total", count, prometheus::label("route", key.first) + "," + prometheus::label("code", std::to_string(key.second)));
    }
  }
  w.family("numaserve_grpc_requests_total", "counter", "gRPC calls answered, by method and status code.");
  {
    std::lock_guard lock(requests_mutex_);
    for (const auto& [key, count] : grpc_calls_) {
      w.sample("numaserve_grpc_requests_total", count, prometheus::label("method", key.first) + "," + prometheus::label("code", key.second));
    }
  }
  w.family("numaserve_stage_seconds", "histogram",
         "Time per request in each stage: query (feature store), extract, queue, forward, total.");
  std::vector<const PerModel*> models;  // by name, as the families always were
  for (std::size_t m = 0, n = models_.size(); m < n; ++m) models.push_back(&models_[m]);
  std::sort(models.begin(), models.end(), [](const PerModel* a, const PerModel* b) { return a->name < b->name; });
  for (const PerModel* m : models) {
    for (std::size_t s = 0; s < m->stages.size(); ++s) {
      m->stages[s].render(out, "numaserve_stage_seconds",
                          prometheus::label("model", m->name) + "," + prometheus::label("stage", kStageNames[s]));
    }
  }
  w.family("numaserve_batch_items", "histogram", "Rows per forward call (one request's items, or a dynamic batch's).");
  batch_items_.render(out, "numaserve_batch_items", "");
  w.family("numaserve_batch_requests", "histogram", "Requests per forward call.");
  batch_requests_.render(out, "numaserve_batch_requests", "");

  render_workers(out, gauges.workers);
  render_levels(out, gauges.levels, levels_);
  render_transport(out, gauges.transport);
  if (gauges.feature_store) render_feature_store(out, feature_store_, *gauges.feature_store);

  render_gauges(out, gauges);
  render_versions(out, gauges);
  {
    std::lock_guard lock(requests_mutex_);
    w.family("numaserve_model_version_requests_total", "counter", "Requests scored, by model and the version that scored them.");
    for (const auto& [key, count] : version_requests_) {
      w.sample("numaserve_model_version_requests_total", count,
               prometheus::label("model", key.first) + "," + prometheus::label("version", key.second));
    }
    w.family("numaserve_model_loads_total", "counter",
             "Versions loaded by the repository's manager, by model and result (ok, or why it was refused).");
    for (const auto& [key, count] : loads_) {
      w.sample("numaserve_model_loads_total", count,
               prometheus::label("model", key.first) + "," + prometheus::label("result", key.second));
    }
  }
  w.family("numaserve_model_load_seconds", "histogram", "Time to load and check a new version, before its warm-up.");
  for (const PerModel* m : models) m->load.render(out, "numaserve_model_load_seconds", prometheus::label("model", m->name));
  w.family("numaserve_model_warmup_seconds", "histogram", "Time to warm a new version up on every worker.");
  for (const PerModel* m : models) m->warmup.render(out, "numaserve_model_warmup_seconds", prometheus::label("model", m->name));
  return out;
}

}  // namespace numaserve::metrics
