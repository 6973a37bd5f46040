#include "options/serve_options.h"

#include <cstdlib>
#include <sstream>

namespace numaserve::options {
namespace {

// A port of the listeners' int: 0 any free one; with `none_allowed`, "none"
// is -1 (no such listener).
OptionSpec port_option(std::string name, std::string help, int& target, bool none_allowed) {
  return {name, "N", std::move(help), target < 0 ? "none" : std::to_string(target),
          [name, &target, none_allowed](const std::string& text) {
            if (none_allowed && text == "none") {
              target = -1;
              return Status();
            }
            unsigned port = 0;
            auto set = set_unsigned(name, text, port, 65535);
            if (set) target = static_cast<int>(port);
            return set;
          }};
}

OptionSpec bind_option(supervisor::Bind& target) {
  return {"bind", "numa|none", "With replicas: pin each replica to one NUMA node, or let all use the whole cpuset",
          target == supervisor::Bind::kNuma ? "numa" : "none", [&target](const std::string& text) {
            if (text != "numa" && text != "none") {
              return Status(make_error(Error::Code::kInvalidArgument, "bind: '" + text + "' is not numa or none", "bind"));
            }
            target = text == "numa" ? supervisor::Bind::kNuma : supervisor::Bind::kNone;
            return Status();
          }};
}

// A setting of two named values: `target` is whether it is `yes`.
OptionSpec either_option(std::string name, const std::string& no, const std::string& yes, std::string help, bool& target) {
  return {name, no + "|" + yes, std::move(help), target ? yes : no, [name, no, yes, &target](const std::string& text) {
            if (text != no && text != yes) {
              return Status(make_error(Error::Code::kInvalidArgument, name + ": '" + text + "' is not " + no + " or " + yes, name));
            }
            target = text == yes;
            return Status();
          }};
}

OptionSpec control_mode_option(lifecycle::ControlMode& target) {
  using lifecycle::ControlMode;
  static const std::pair<const char*, ControlMode> kModes[] = {
      {"none", ControlMode::kNone}, {"poll", ControlMode::kPoll}, {"explicit", ControlMode::kExplicit}};
  std::string current;
  for (const auto& [name, mode] : kModes) current = mode == target ? name : current;
  return {"model_control_mode", "none|poll|explicit",
          "With --model-repository: after start, load nothing more (none), follow the repository's changes (poll: "
          "inotify and a rescan every --repository-rescan seconds), or only the admin port's POST "
          "/v2/repository/models/NAME/load and /unload (explicit; poll takes them too)",
          current, [&target](const std::string& text) {
            for (const auto& [name, mode] : kModes) {
              if (text == name) {
                target = mode;
                return Status();
              }
            }
            return Status(make_error(Error::Code::kInvalidArgument,
                                     "model_control_mode: '" + text + "' is not none, poll or explicit", "model_control_mode"));
          }};
}

std::vector<OptionSpec> reload_options(lifecycle::ReloadConfig& r) {
  return {
      text_option("model_repository", "DIR",
                  "A model repository, DIR/<model>/<version>/{model.pt,model.yaml} with an optional "
                  "DIR/<model>/config.yaml (version policy, labels); instead of --model-dir",
                  r.repository),
      control_mode_option(r.control_mode),
      either_option("reload_policy", "resource", "availability",
                    "A new version loads and warms beside the old, which unloads after the switch (availability: "
                    "memory for both), or the old unloads first and the model is unavailable meanwhile (resource)",
                    r.availability),
      either_option("reload_priority", "normal", "idle",
                    "A load's CPU work (reading model.pt, its checks, a synthetic forward) runs only on what the "
                    "workers leave (idle: p99 holds, a saturated replica loads slowly) or beside them (normal: a load "
                    "ends in its own time, requests wait for it meanwhile)",
                    r.idle_priority),
      share_option("reload_cpu_share",
                   "The share of one CPU a reload (reading and parsing model.pt, the graph rewrites) may take: it "
                   "sleeps after each MiB read and after the rewrites in proportion to its CPU time (1: as fast as it "
                   "can, as start-up always does); a 200 MiB model loads in about 0.8 s at 0.25, 0.4 s at 1",
                   r.cpu_share),
      seconds_option("repository_rescan", "In poll mode, a full rescan of the repository this often besides inotify",
                     r.rescan_seconds),
  };
}

std::vector<OptionSpec> store_options(ServeOptions& o) {
  auto& c = o.store;
  return {
      text_option("feature_store", "FILE|URL",
                  "Where user and item features come from: a JSON Lines file loaded at start, or Feast's Redis online "
                  "store read per request, redis://[user:password@]host[:port][/db], unix:///path.sock[?db=N] or a "
                  "Redis Cluster's redis+cluster://[user:password@]host:port[,host:port...] (none: inline features only)",
                  o.feature_store),
      text_option("feature_store_password_file", "FILE",
                  "The Redis password, the file's first line (a mounted secret); never logged", o.feature_store_password_file),
      seconds_option("feature_query_timeout", "Deadline of a request's Redis query; then --on-feature-store-error applies",
                     c.client.timeout_seconds),
      either_option("on_feature_store_error", "default", "fail",
                    "When the Redis store times out, fails or holds an unreadable value: answer with model.yaml's "
                    "defaults for what is missing (counted), or refuse with 503 + Retry-After",
                    c.fail_on_error),
      seconds_option("max_feature_age",
                     "Redis values whose feature view's timestamp (_ts:<view>) is older count as missing; 0: any age",
                     c.max_age_seconds),
      seconds_option("item_cache_ttl",
                     "Items fetched from Redis are kept, extracted, this long by the worker that fetched them; 0: "
                     "always fetched",
                     c.item_cache_ttl_seconds),
  };
}

std::vector<OptionSpec> transport_options(http::ServerConfig& h) {
  return {
      text_option("listen_address", "ADDR", "Address to listen on", h.host),
      port_option("port", "HTTP port; 0 picks a free one (logged)", h.port, false),
      port_option("admin_port",
                  "Port for /metrics and /placement (and the probes, also on --port), which --port then no longer "
                  "serves; 0 picks a free one (logged); none: all on --port",
                  h.admin_port, true),
      port_option("grpc_port",
                  "Port for gRPC (HTTP/2 without TLS): numaserve.v1.Ranking, KServe v2's GRPCInferenceService and "
                  "grpc.health.v1.Health, on the same workers; 0 picks a free one (logged); none: no gRPC",
                  h.grpc_port, true),
      quantity_option("max_body_bytes", "Largest request body, chunked or not (413 beyond), and gRPC request message "
                      "(RESOURCE_EXHAUSTED beyond)", h.max_body_bytes),
      quantity_option("max_header_bytes", "Largest request line and header (431 beyond)", h.max_header_bytes),
      count_option("max_connections", "N",
                   "Open connections before a new one gets 503 and is closed; 0: the file-descriptor limit less 256",
                   h.max_connections),
      seconds_option("header_timeout", "From a request's first byte to the end of its header, else 408 and close",
                     h.header_timeout_seconds),
      seconds_option("body_timeout", "From the end of a header to the end of its body, and the longest send of a reply",
                     h.body_timeout_seconds),
      seconds_option("idle_timeout", "A keep-alive connection without a request is closed after this",
                     h.idle_timeout_seconds),
      count_option("max_connection_requests", "N",
                   "A connection closes after the reply to its Nth request (Connection: close; what the client "
                   "pipelined before it is answered first), so clients reconnect and kube-proxy spreads them again; 0: never",
                   h.max_connection_requests),
      seconds_option("max_connection_age",
                     "A connection closes after the first reply once it is this old (each drawn within ±10%), as "
                     "--max-connection-requests does; 0: never",
                     h.max_connection_age_seconds),
      seconds_option("shutdown_idle",
                     "During the drain, a connection without a request is closed once it has been idle this long "
                     "(a request that comes before is answered, with Connection: close)",
                     h.shutdown_idle_seconds),
      switch_option("reuse_port", "Share the port with other processes (SO_REUSEPORT)", h.reuse_port),
  };
}

// One level's policy: "LEVEL:KEY=VALUE;KEY=VALUE" (the list's items are
// comma-separated, so a level's settings are not).
Status set_level_policy(const std::string& spec, std::vector<batching::LevelPolicy>& policies) {
  const auto bad = [&spec](const std::string& why) {
    return Status(make_error(Error::Code::kInvalidArgument, "priority_level: '" + spec + "': " + why, "priority_level"));
  };
  const auto colon = spec.find(':');
  unsigned level = 0;
  if (colon == std::string::npos || !set_unsigned("priority_level", spec.substr(0, colon), level) || level == 0) {
    return bad("want LEVEL:KEY=VALUE;..., LEVEL 1 or more");
  }
  if (policies.size() < level) policies.resize(level);
  batching::LevelPolicy& policy = policies[level - 1];
  std::stringstream settings(spec.substr(colon + 1));
  for (std::string pair; std::getline(settings, pair, ';');) {
    const auto eq = pair.find('=');
    const std::string key = pair.substr(0, eq), value = eq == std::string::npos ? "" : pair.substr(eq + 1);
    unsigned n = 0;
    if (key == "max_queue_size" && set_unsigned(key, value, n)) {
      policy.max_queue_size = n;
    } else if (key == "timeout_us" && set_unsigned(key, value, n)) {
      policy.timeout = std::chrono::microseconds(n);
    } else if (key == "timeout_action" && (value == "reject" || value == "delay")) {
      policy.timeout_action = value == "reject" ? batching::TimeoutAction::kReject : batching::TimeoutAction::kDelay;
    } else if (key == "allow_timeout_override" && set_bool(key, value, policy.allow_timeout_override)) {
    } else {
      return bad("'" + pair + "' is not max_queue_size=N, timeout_us=N, timeout_action=reject|delay or "
                 "allow_timeout_override=true|false");
    }
  }
  return {};
}

OptionSpec priority_level_option(std::vector<batching::LevelPolicy>& target) {
  OptionSpec row{"priority_level", "LEVEL:KEY=VALUE;...",
                 "One priority level's queue policy, in Triton's terms: max_queue_size=N (its requests waiting per "
                 "worker; 0: up to --queue-capacity), timeout_us=N (its longest wait, and the most a request's "
                 "parameters.timeout may ask; 0: --max-queue-delay), timeout_action=reject|delay (past it: refused, or "
                 "run after its level's requests still in time), allow_timeout_override=true|false (a request may ask "
                 "for less). Repeat per level; the others take the defaults",
                 "", [&target](const std::string& text) {
                   target.clear();  // a later source replaces an earlier one's list
                   std::stringstream specs(text);
                   for (std::string spec; std::getline(specs, spec, ',');) {
                     if (spec.empty()) continue;
                     if (auto set = set_level_policy(spec, target); !set) return set;
                   }
                   return Status();
                 }};
  row.repeatable = true;
  return row;
}

std::vector<OptionSpec> serving_options(api::ServiceConfig& s) {
  auto& b = s.batching;
  return {
      count_option("queue_capacity", "N", "Requests waiting for a forward, per worker, before 503 + Retry-After",
                   b.queue_capacity),
      duration_option("max_queue_delay",
                      "Longest wait for a forward: older requests get 503, and a worker refuses new ones at once when "
                      "its oldest waited longer or its queued rows would take longer",
                      b.max_queue_delay),
      count_option("max_batch_items", "N",
                   "Most rows in one forward: requests that arrived together are joined up to it (1: one request per "
                   "forward)",
                   b.max_batch_items),
      {"max_batch_delay_us", "N",
       "Wait this long after a worker's first queued request for more to join it, in microseconds (0: never wait)",
       std::to_string(b.max_batch_delay.count()),
       [&b](const std::string& text) {
         unsigned us = 0;
         auto set = set_unsigned("max_batch_delay_us", text, us);
         if (set) b.max_batch_delay = std::chrono::microseconds(us);
         return set;
       }},
      count_option("priority_levels", "N",
                   "Priority levels a request may name (parameters.priority; 1 the highest): a worker starts no lower "
                   "level's forward while a higher level's request waits, and under overload refuses the lowest first",
                   b.priority_levels),
      count_option("default_priority", "LEVEL", "The level of a request that names none; 0: the lowest",
                   b.default_priority),
      priority_level_option(b.policies),
      count_option("max_items", "N", "Most items in one /predict request (400 beyond)", s.limits.max_items),
      count_option("warmup_rounds", "N", "Forwards per model and worker before turning ready", s.warmup_rounds),
  };
}

}  // namespace

std::vector<OptionSpec> serve_options(ServeOptions& o) {
  std::vector<OptionSpec> rows = {
      list_option("model_dir", "DIR", "A model directory (model.pt + model.yaml); the first is the default model",
                  o.model_dirs),
      graph_optimizations_option(o.graph_optimizations),
      precision_option(o.precision),
      embedding_precision_option(o.embedding_precision),
      switch_option("huge_pages",
                    "Move each model's weights of 4 MiB and more into memory that asks for transparent huge pages "
                    "(THP mode madvise or always): embedding tables read at random miss the TLB far less",
                    o.huge_pages),
      count_option("workers", "N", "Inference workers; 0: one per physical core of the cpuset", o.threads.workers),
      count_option("intra_op_threads", "N",
                   "LibTorch threads per worker; 0: the worker's CPUs (workers x threads <= cpuset)",
                   o.threads.intra_op_threads),
      switch_option("memory_bind", "Bind memory to the cpuset's nodes with set_mempolicy where the kernel allows it",
                    o.memory_bind),
      seconds_option("shutdown_delay", "After SIGTERM, keep serving (not ready) this long before closing the port",
                     o.shutdown_delay),
      seconds_option("shutdown_grace", "Longest drain after SIGTERM; then exit 1 with what was left", o.shutdown_grace),
      count_option("replicas_per_numa_node", "N",
                   "Run a supervisor and N replica processes per NUMA node of the cpuset, each pinned to its node's "
                   "CPUs and memory, sharing the port",
                   o.replicas.per_numa_node),
      count_option("replicas", "N",
                   "Run a supervisor and N replica processes (spread evenly over the nodes with --bind numa)",
                   o.replicas.replicas),
      bind_option(o.replicas.bind),
      count_option("max_restarts", "N", "With replicas: restarts of one replica within 5 minutes before the group stops",
                   o.supervisor.max_restarts),
  };
  for (auto& row : reload_options(o.reload)) rows.push_back(std::move(row));
  for (auto& row : store_options(o)) rows.push_back(std::move(row));
  for (auto& row : transport_options(o.http)) rows.push_back(std::move(row));
  for (auto& row : serving_options(o.service)) rows.push_back(std::move(row));
  for (auto& row : log_options(o.log)) rows.push_back(std::move(row));
  return rows;
}

OptionSpec graph_optimizations_option(bool& target) {
  return either_option("graph_optimizations", "off", "on",
                       "Rewrite each model's forward at load to run its DLRM dot interaction and embedding bags as fused "
                       "CPU kernels (kept only if its scores match the model's on random rows; the log and /placement "
                       "say what applied)",
                       target);
}

namespace {

// A row whose value is one of `names` (model.yaml's words for it).
template <typename E, std::size_t N>
OptionSpec named_option(std::string name, const Names<E, N>& names, std::string help, std::optional<E>& target) {
  std::string metavar;
  for (const auto& row : names.table) metavar += (metavar.empty() ? "" : "|") + std::string(row.second);
  return without_default({name, metavar, std::move(help), "", [&target, &names, name](const std::string& text) {
                            const auto parsed = names.parse(text);
                            if (!parsed) {
                              return Status(make_error(Error::Code::kInvalidArgument,
                                                       name + ": '" + text + "' is not " + names.choices(), name));
                            }
                            target = *parsed;
                            return Status();
                          }});
}

}  // namespace

OptionSpec precision_option(std::optional<features::Precision>& target) {
  return named_option("precision", features::kPrecisionNames,
                      "Every model's linear layers' precision, over its model.yaml's (default: model.yaml's, else fp32), and "
                      "its tables' unless --embedding-precision is given: bf16 where the CPU has AVX512_BF16 or AMX, int8 "
                      "where it has AVX512_VNNI (refused elsewhere; -if-available serves fp32 there), if its scores stay "
                      "within precision_max_drift of fp32's",
                      target);
}

OptionSpec embedding_precision_option(std::optional<features::TablePrecision>& target) {
  return named_option("embedding_precision", features::kTablePrecisionNames,
                      "Every model's embedding tables' precision, over its model.yaml's (default: model.yaml's, else as "
                      "the precision): int8 and int4 hold each row as codes with a scale and a bias, on any CPU",
                      target);
}

std::vector<OptionSpec> check_model_options(CheckModelOptions& o) {
  return command_line_only({
      graph_optimizations_option(o.graph_optimizations),
      precision_option(o.precision),
      embedding_precision_option(o.embedding_precision),
      path_option("requests", "FILE",
                  "With --precision bf16|int8 (or --embedding-precision): /predict bodies, one per line, scored in fp32 "
                  "and as asked to report the drift "
                  "(max and mean |score difference|, per-request Spearman, top-10 overlap)",
                  o.requests),
      path_option("feature_store", "FILE", "The JSON Lines store the requests' ids are looked up in", o.feature_store),
      path_option("labels", "FILE", "Each request's labels, a JSON array of 0 and 1 per line: adds AUC and log-loss of both",
                  o.labels),
  });
}

unsigned HealthOptions::default_port() {
  for (const char* name : {"NUMASERVE_ADMIN_PORT", "NUMASERVE_PORT"}) {
    const char* value = std::getenv(name);
    unsigned port = 0;
    if (value != nullptr && set_unsigned(name, value, port, 65535)) return port;
  }
  return 8080;
}

std::vector<OptionSpec> health_options(HealthOptions& o) {
  return command_line_only({
      without_default(
          count_option("port", "N", "Port (default: NUMASERVE_ADMIN_PORT, else NUMASERVE_PORT, else 8080)", o.port, 65535u)),
      text_option("path", "PATH", "Path to GET", o.path),
      number_option("timeout", "SECONDS", "Seconds to wait for the status line", o.timeout_seconds),
  });
}

}  // namespace numaserve::options
