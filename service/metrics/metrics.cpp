#include "metrics/metrics.h"

#include <cstdio>

namespace numaserve::metrics {
namespace {

// Latency buckets from 50 µs to 10 s: forward of one small batch sits near
// the bottom, a queue under overload near the top.
std::vector<double> latency_buckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::vector<double> powers_of_two(double last) {
  std::vector<double> out;
  for (double b = 1; b <= last; b *= 2) out.push_back(b);
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Label values escaped as the exposition format asks.
std::string escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(value) + "\n";
}

// Per worker: how evenly connections and forwards spread, and how much
// work idle workers took from busy ones.
void render_workers(std::string& out, const std::vector<WorkerGauges>& workers) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const WorkerGauges&);
  };
  static const Family kFamilies[] = {
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
  };
  for (const auto& family : kFamilies) {
    header(out, family.name, family.type, family.help);
    for (std::size_t i = 0; i < workers.size(); ++i) {
      sample(out, family.name, "worker=\"" + std::to_string(i) + "\"", family.value(workers[i]));
    }
  }
}

void render_transport(std::string& out, const TransportGauges& t) {
  header(out, "numaserve_http_connections_closed_total", "counter",
         "Connections the server closed: idle past the idle timeout, timeout (a header or body not received, or a "
         "reply not taken, in time; 408), rejected (malformed, header or body over the limit; 400, 431, 413).");
  sample(out, "numaserve_http_connections_closed_total", "reason=\"idle\"", static_cast<double>(t.idle_closed));
  sample(out, "numaserve_http_connections_closed_total", "reason=\"timeout\"", static_cast<double>(t.timed_out));
  sample(out, "numaserve_http_connections_closed_total", "reason=\"rejected\"", static_cast<double>(t.rejected));
  header(out, "numaserve_http_connections_refused_total", "counter",
         "Connections answered 503 and closed because max_connections were open.");
  sample(out, "numaserve_http_connections_refused_total", "", static_cast<double>(t.refused));
  header(out, "numaserve_http_max_connections", "gauge", "The open-connection limit in force.");
  sample(out, "numaserve_http_max_connections", "", static_cast<double>(t.max_connections));
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
  const std::string prefix = labels.empty() ? "" : labels + ",";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    sample(out, name + "_bucket", prefix + "le=\"" + le + "\"", static_cast<double>(cumulative));
  }
  sample(out, name + "_sum", labels, sum_.load(std::memory_order_relaxed));
  sample(out, name + "_count", labels, static_cast<double>(cumulative));
}

Metrics::Metrics(const std::vector<std::string>& models)
    : batch_items_(powers_of_two(8192)), batch_requests_(powers_of_two(256)) {
  for (const auto& model : models) {
    auto& stages = stages_[model];
    for (std::size_t s = 0; s < kStageNames.size(); ++s) stages.emplace_back(latency_buckets());
  }
}

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard lock(requests_mutex_);
  ++requests_[{route, status}];
}

void Metrics::observe(Stage stage, const std::string& model, double seconds) {
  const auto it = stages_.find(model);
  if (it != stages_.end()) it->second[static_cast<std::size_t>(stage)].observe(seconds);
}

void Metrics::observe_batch(std::size_t items, std::size_t requests) {
  batch_items_.observe(static_cast<double>(items));
  batch_requests_.observe(static_cast<double>(requests));
}

std::string Metrics::render(const Gauges& gauges) const {
  std::string out;
  header(out, "numaserve_requests_total", "counter", "HTTP requests answered, by route and status code.");
  {
    std::lock_guard lock(requests_mutex_);
    for (const auto& [key, count] : requests_) {
      sample(out, "numaserve_requests_total",
             "route=\"" + escape(key.first) + "\",code=\"" + std::to_string(key.second) + "\"",
             static_cast<double>(count));
    }
  }
  header(out, "numaserve_stage_seconds", "histogram",
         "Time per request in each stage: query (feature store), extract, queue, forward, total.");
  for (const auto& [model, stages] : stages_) {
    for (std::size_t s = 0; s < stages.size(); ++s) {
      stages[s].render(out, "numaserve_stage_seconds",
                       "model=\"" + escape(model) + "\",stage=\"" + kStageNames[s] + "\"");
    }
  }
  header(out, "numaserve_batch_items", "histogram", "Rows per forward call (one request's items, or a dynamic batch's).");
  batch_items_.render(out, "numaserve_batch_items", "");
  header(out, "numaserve_batch_requests", "histogram", "Requests per forward call.");
  batch_requests_.render(out, "numaserve_batch_requests", "");

  render_workers(out, gauges.workers);
  render_transport(out, gauges.transport);

  header(out, "numaserve_queue_depth", "gauge", "Requests waiting for an inference worker.");
  sample(out, "numaserve_queue_depth", "", static_cast<double>(gauges.queue_depth));
  header(out, "numaserve_in_flight_requests", "gauge", "Requests being handled.");
  sample(out, "numaserve_in_flight_requests", "", static_cast<double>(gauges.in_flight));
  header(out, "numaserve_busy_workers", "gauge", "Inference workers running a forward.");
  sample(out, "numaserve_busy_workers", "", static_cast<double>(gauges.busy_workers));
  header(out, "numaserve_ready", "gauge", "1 when warmed up and not draining.");
  sample(out, "numaserve_ready", "", gauges.ready ? 1 : 0);
  header(out, "numaserve_threads", "gauge", "Threads by kind.");
  for (const auto& [kind, count] : gauges.threads) {
    sample(out, "numaserve_threads", "kind=\"" + escape(kind) + "\"", static_cast<double>(count));
  }
  header(out, "numaserve_placement_info", "gauge", "Where this process runs: cpus, mems, NUMA nodes, threads.");
  std::string labels;
  for (const auto& [key, value] : gauges.placement) {
    labels += (labels.empty() ? "" : ",") + key + "=\"" + escape(value) + "\"";
  }
  sample(out, "numaserve_placement_info", labels, 1);
  header(out, "numaserve_model_weights_local_ratio", "gauge",
         "Share of the model's resident weight pages on the NUMA nodes of the service's cpuset.");
  for (const auto& [model, ratio] : gauges.model_local_ratio) {
    sample(out, "numaserve_model_weights_local_ratio", "model=\"" + escape(model) + "\"", ratio);
  }
  return out;
}

}  // namespace numaserve::metrics
