#include "options/serve_options.h"

#include "numaserve/common/log.h"

namespace numaserve::serve {
namespace {

// "none", or a port (0: any free one).
Status set_admin_port(const std::string& text, int& target) {
  if (text == "none") {
    target = -1;
    return {};
  }
  unsigned port = 0;
  if (auto parsed = numaserve::set_unsigned("admin_port", text, port, 65535); !parsed) return parsed;
  target = static_cast<int>(port);
  return {};
}

}  // namespace

std::vector<OptionSpec> serve_options(ServeOptions& o) {
  using numaserve::set_list;
  using numaserve::set_quantity;
  using numaserve::set_string;
  using numaserve::set_bool;
  using numaserve::set_unsigned;
  std::vector<OptionSpec> rows = {
      {"model_dir", "DIR", "A model directory (model.pt + model.yaml); the first is the default model", "",
       [&o](const std::string& t) { return set_list(o.model_dirs, t); }, true},
      {"feature_store", "FILE", "JSON Lines file of user and item features, loaded at start (none: inline features only)",
       "", [&o](const std::string& t) { return set_string(o.feature_store, t); }},
      {"listen_address", "ADDR", "Address to listen on", "0.0.0.0",
       [&o](const std::string& t) { return set_string(o.listen_address, t); }},
      {"port", "N", "HTTP port; 0 picks a free one (logged)", "8080",
       [&o](const std::string& t) { return set_unsigned("port", t, o.port, 65535); }},
      {"admin_port", "N",
       "Port for /metrics and /placement (and the probes, also on --port), which --port then no longer serves; "
       "0 picks a free one (logged); none: all on --port",
       "none", [&o](const std::string& t) { return set_admin_port(t, o.admin_port); }},
      {"workers", "N", "Inference workers; 0: one per physical core of the cpuset", "0",
       [&o](const std::string& t) { return set_unsigned("workers", t, o.threads.workers); }},
      {"intra_op_threads", "N", "LibTorch threads per worker; 0: the worker's CPUs (workers x threads <= cpuset)", "0",
       [&o](const std::string& t) { return set_unsigned("intra_op_threads", t, o.threads.intra_op_threads); }},
      {"queue_capacity", "N", "Requests waiting for a forward, per worker, before 503 + Retry-After", "64",
       [&o](const std::string& t) { return set_unsigned("queue_capacity", t, o.queue_capacity); }},
      {"max_queue_delay", "DURATION",
       "Longest wait for a forward: older requests get 503, and a worker refuses new ones at once when its oldest "
       "waited longer or its queued rows would take longer",
       "1s", [&o](const std::string& t) { return numaserve::set_seconds("max_queue_delay", t, o.max_queue_delay); }},
      {"max_batch_items", "N",
       "Most rows in one forward: requests that arrived together are joined up to it (1: one request per forward)",
       "1024", [&o](const std::string& t) { return set_unsigned("max_batch_items", t, o.max_batch_items); }},
      {"max_batch_delay_us", "N",
       "Wait this long after a worker's first queued request for more to join it, in microseconds (0: never wait)",
       "0", [&o](const std::string& t) { return set_unsigned("max_batch_delay_us", t, o.max_batch_delay_us); }},
      {"max_items", "N", "Most items in one /predict request (400 beyond)", "2000",
       [&o](const std::string& t) { return set_unsigned("max_items", t, o.max_items); }},
      {"max_body_bytes", "QUANTITY", "Largest request body, chunked or not (413 beyond)", "8Mi",
       [&o](const std::string& t) { return set_quantity("max_body_bytes", t, o.max_body_bytes); }},
      {"max_header_bytes", "QUANTITY", "Largest request line and header (431 beyond)", "16Ki",
       [&o](const std::string& t) { return set_quantity("max_header_bytes", t, o.max_header_bytes); }},
      {"max_connections", "N",
       "Open connections before a new one gets 503 and is closed; 0: the file-descriptor limit less 256", "0",
       [&o](const std::string& t) { return set_unsigned("max_connections", t, o.max_connections); }},
      {"header_timeout", "DURATION", "From a request's first byte to the end of its header, else 408 and close", "10s",
       [&o](const std::string& t) { return numaserve::set_seconds("header_timeout", t, o.header_timeout); }},
      {"body_timeout", "DURATION", "From the end of a header to the end of its body, and the longest send of a reply",
       "30s", [&o](const std::string& t) { return numaserve::set_seconds("body_timeout", t, o.body_timeout); }},
      {"idle_timeout", "DURATION", "A keep-alive connection without a request is closed after this", "60s",
       [&o](const std::string& t) { return numaserve::set_seconds("idle_timeout", t, o.idle_timeout); }},
      {"memory_bind", "", "Bind memory to the cpuset's nodes with set_mempolicy where the kernel allows it", "true",
       [&o](const std::string& t) { return set_bool("memory_bind", t, o.memory_bind); }},
      {"warmup_rounds", "N", "Forwards per model and worker before turning ready", "3",
       [&o](const std::string& t) { return set_unsigned("warmup_rounds", t, o.warmup_rounds); }},
      {"shutdown_delay", "DURATION", "After SIGTERM, keep serving (not ready) this long before closing the port", "0s",
       [&o](const std::string& t) { return numaserve::set_seconds("shutdown_delay", t, o.shutdown_delay); }},
      {"shutdown_grace", "DURATION", "Longest drain after SIGTERM; then exit 1 with what was left", "30s",
       [&o](const std::string& t) { return numaserve::set_seconds("shutdown_grace", t, o.shutdown_grace); }},
      {"reuse_port", "", "Share the port with other processes (SO_REUSEPORT)", "false",
       [&o](const std::string& t) { return set_bool("reuse_port", t, o.reuse_port); }},
      {"replicas_per_numa_node", "N",
       "Run a supervisor and N worker processes per NUMA node of the cpuset, each pinned to its node's CPUs "
       "and memory, sharing the port",
       "0", [&o](const std::string& t) { return set_unsigned("replicas_per_numa_node", t, o.replicas.per_node); }},
      {"replicas", "N", "Run a supervisor and N worker processes (spread evenly over the nodes with --bind numa)", "0",
       [&o](const std::string& t) { return set_unsigned("replicas", t, o.replicas.replicas); }},
      {"bind", "numa|none", "With replicas: pin each worker to one NUMA node, or let all use the whole cpuset", "numa",
       [&o](const std::string& t) {
         if (t != "numa" && t != "none") {
           return Status(numaserve::make_error(numaserve::Error::Code::kInvalidArgument,
                                               "bind: '" + t + "' is not numa or none", "bind"));
         }
         o.replicas.bind = t == "numa" ? numaserve::supervisor::Bind::kNuma : numaserve::supervisor::Bind::kNone;
         return Status();
       }},
      {"max_restarts", "N", "With replicas: restarts of one worker within 5 minutes before the group stops", "5",
       [&o](const std::string& t) { return set_unsigned("max_restarts", t, o.max_restarts); }},
  };
  for (auto& row : numaserve::log_options(o.log)) rows.push_back(std::move(row));
  return rows;
}

}  // namespace numaserve::serve
