#include "startup/startup.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "api/router.h"
#include "api/service.h"
#include "feature_store/store.h"
#include "http/server.h"
#include "numa/numa.h"
#include "lifecycle/manager.h"
#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"
#include "supervisor/supervisor.h"
#include "threads/threads.h"

namespace numaserve::startup {
namespace {

using options::ServeOptions;

// After the grace period the transport cuts what is left within a sweep
// tick; a worker still not back from its turn this much later is stuck.
constexpr double kStuckDrainSeconds = 2;

int fail(const std::string& message) {
  log(LogLevel::kError, message);
  return 1;
}

// Who answers: host/pid, and the replica under the supervisor.
std::string instance_name() {
  const std::string replica = supervisor::replica_name();
  return host_name() + "/" + std::to_string(getpid()) + (replica.empty() ? "" : " " + replica);
}

// Where this process may run, and the machine around it: what both the
// supervisor and a service plan from.
struct Machine {
  Placement placement;
  Topology topology;
};

Result<Machine> read_machine() {
  auto placement = discover_placement("/");
  if (!placement) return tl::unexpected(std::move(placement.error()).with_context("reading this process's placement"));
  auto topology = discover_topology(TopologySource::live());
  if (!topology) return tl::unexpected(std::move(topology.error()).with_context("reading the machine's topology"));
  return Machine{std::move(*placement), std::move(*topology)};
}

// Signals are taken by sigwait in drain(); every thread started later
// inherits the block, so none of them is interrupted by SIGTERM. SIGUSR1
// is the supervisor opening the group (see supervisor.h).
sigset_t block_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Memory policy, then this thread's CPUs: it loads the weights (first
// touch) and starts every other thread, which inherit them.
Result<api::PlacementReport> bind(const ServeOptions& o, const Machine& machine, const threads::ThreadPlan& plan) {
  api::PlacementReport report;
  report.plan = plan;
  report.cgroup = machine.placement.cgroup;
  report.instance = instance_name();
  if (o.memory_bind) {
    report.memory_policy = numa::bind_memory(plan.memory_nodes);
    if (!report.memory_policy.applied) log(LogLevel::kWarning, report.memory_policy.reason);
  } else {
    report.memory_policy.reason = "disabled by --memory-bind=false";
  }
  if (auto bound = numa::bind_current_thread(plan.cpus); !bound) return tl::unexpected(bound.error());
  return report;
}

// What --graph-optimizations did to a model: a warning when the rewritten
// forward was refused (the model runs, slower than it could).
void log_graph_report(const api::Model& model) {
  const auto report = model.graph_report();
  auto join = [&report](bool applied) {
    std::string out;
    for (const auto& rewrite : report.rewrites) {
      for (const auto& line : applied ? rewrite.applied : rewrite.not_applied) out += (out.empty() ? "" : "; ") + rewrite.name + ": " + line;
    }
    return out;
  };
  LogFields fields = {{"model", model.spec().name}, {"state", report.state}};
  if (!report.reason.empty()) fields.emplace_back("reason", report.reason);
  if (const auto applied = join(true); !applied.empty()) fields.emplace_back("applied", applied);
  if (const auto left = join(false); !left.empty()) fields.emplace_back("not_applied", left);
  log(report.state == "failed" ? LogLevel::kWarning : LogLevel::kInfo, "graph optimizations", fields);
  // bf16 or int8 asked for and fp32 served: the fleet's machines differ, say which ran what.
  const auto precision = model.precision();
  if (precision.requested != "fp32" || precision.narrowed()) {
    LogFields p = {{"model", model.spec().name}, {"requested", precision.requested}, {"served", precision.served},
                   {"tables", precision.tables}};
    if (!precision.reason.empty()) p.emplace_back("reason", precision.reason);
    if (precision.narrowed()) {
      if (!precision.instructions.empty()) p.emplace_back("instructions", precision.instructions);
      p.emplace_back("max_drift", format_number(precision.max_drift));
    }
    log(precision.reason.empty() ? LogLevel::kInfo : LogLevel::kWarning, "precision", p);
  }
}

Result<std::vector<std::unique_ptr<api::Model>>> load_models(const ServeOptions& o, const Runtime& runtime) {
  std::vector<std::unique_ptr<api::Model>> models;
  for (const auto& dir : o.model_dirs) {
    auto loaded = runtime.load(dir, "", 1.0);
    if (!loaded) return tl::unexpected(loaded.error());
    for (const auto& m : models) {
      if (m->spec().name == (*loaded)->spec().name) {
        return make_error(Error::Code::kInvalidArgument, dir + ": a model named " + m->spec().name + " is already served",
                          "model_dir");
      }
    }
    log_graph_report(**loaded);
    models.push_back(std::move(*loaded));
  }
  return models;
}

// The store --feature-store names; a networked one waits on the workers' loops.
Result<std::unique_ptr<feature_store::FeatureStore>> open_store(const ServeOptions& o,
                                                                const std::vector<std::unique_ptr<api::Model>>& models,
                                                                std::size_t workers, http::Server& server) {
  std::vector<const features::ModelSpec*> specs;
  for (const auto& m : models) specs.push_back(&m->spec());
  feature_store::OpenConfig config{o.feature_store, o.feature_store_password_file, o.store, workers,
                                   [&server](std::size_t worker) -> boost::asio::io_context& { return server.context(worker); }};
  return feature_store::open_store(config, specs);
}

// The transport's counters as /metrics shows them.
void transport_gauges(const http::Server& server, metrics::Gauges& g) {
  const auto workers = server.stats();
  for (std::size_t i = 0; i < workers.size() && i < g.workers.size(); ++i) {
    g.workers[i].connections = workers[i].connections;
    g.workers[i].accepted = workers[i].accepted;
    g.workers[i].requests_read = workers[i].requests;
    g.workers[i].busy_share = workers[i].busy_share;
  }
  for (const auto& w : workers) {
    g.transport.idle_closed += w.idle_closed;
    g.transport.timed_out += w.timed_out;
    g.transport.rejected += w.rejected;
    g.transport.cut += w.cut;
    g.transport.retired += w.retired;
  }
  g.transport.refused = server.refused_connections();
  g.transport.max_connections = server.max_connections();
}

// HTTP up with one event loop per worker: from here each worker pins
// itself and warms the models up while its loop already answers /healthz.
Status start_serving(const ServeOptions& o, http::Server& server, api::Router& router) {
  if (auto started = server.start(router); !started) return started;
  log(LogLevel::kInfo, "listening (live, not ready until warm)",
      {{"address", o.http.host}, {"port", std::to_string(server.port())},
       {"admin_port", server.admin_port() < 0 ? "none" : std::to_string(server.admin_port())},
       {"grpc_port", server.grpc_port() < 0 ? "none" : std::to_string(server.grpc_port())},
       {"max_connections", std::to_string(server.max_connections())}});
  return {};
}

// Ready until SIGTERM (SIGUSR1 opens the supervisor's group), then the drain,
// which must end within the grace period even if a client stalls: at its
// end the transport cuts what is left (logged, counted) and the exit status
// is 1. Returns the exit status.
int drain(const ServeOptions& o, const sigset_t& signals, http::Server& server, api::Service& service,
          lifecycle::Manager* manager) {
  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGUSR1) {
    service.readiness().open_group();
    log(LogLevel::kInfo, "ready: the group is open");
  }
  log(LogLevel::kInfo, "draining", {{"signal", signal == SIGTERM ? "SIGTERM" : "SIGINT"}});
  const auto cut_at = std::chrono::steady_clock::now() + to_duration(o.shutdown_delay + o.shutdown_grace);
  service.readiness().begin_drain();
  server.announce_shutdown();
  // The last resort, should a worker never come back from its turn.
  std::thread([grace = o.shutdown_grace + o.shutdown_delay] {
    std::this_thread::sleep_for(to_duration(grace + kStuckDrainSeconds));
    log(LogLevel::kError, "the workers did not end after the shutdown grace period; exiting");
    _exit(1);
  }).detach();
  std::this_thread::sleep_for(to_duration(o.shutdown_delay));
  // No load after this: one under way ends first (the workers still serve
  // its warm-up).
  if (manager != nullptr) manager->stop();
  server.stop(cut_at);
  std::uint64_t cut = 0;
  for (const auto& worker : server.stats()) cut += worker.cut;
  if (cut != 0) {
    log(LogLevel::kError, "shutdown grace period over; requests cut", {{"requests", std::to_string(cut)}});
    return 1;
  }
  log(LogLevel::kInfo, "stopped");
  return 0;
}

// Placement first: nothing is allocated or started before we know where.
Result<api::PlacementReport> place(const ServeOptions& o) {
  auto machine = read_machine();
  if (!machine) return tl::unexpected(machine.error());
  auto plan = threads::plan_threads(machine->placement, machine->topology, o.threads);
  if (!plan) return tl::unexpected(plan.error());
  for (const auto& note : plan->notes) log(LogLevel::kWarning, note);
  return bind(o, *machine, *plan);
}

// The HTTP transport: a worker (an event loop) per planned worker thread.
http::ServerConfig transport_config(const ServeOptions& o, std::size_t workers, bool supervised) {
  http::ServerConfig transport = o.http;
  transport.workers = workers;
  transport.reuse_port = o.http.reuse_port || supervised;
  return transport;
}

// Options that contradict each other. Where the models come from:
// --model-dir's list, or --model-repository's manager, which loads each
// model's versions now and, in poll and explicit mode, later ones.
Status check_options(const ServeOptions& o) {
  const bool repository = !o.reload.repository.empty();
  if (repository && !o.model_dirs.empty()) {
    return make_error(Error::Code::kInvalidArgument, "give --model-repository or --model-dir, not both", "model_repository");
  }
  if (!repository && o.model_dirs.empty()) {
    return make_error(Error::Code::kInvalidArgument,
                      "no model: give --model-dir DIR (a directory with model.pt and model.yaml) or --model-repository DIR", "model_dir");
  }
  if (!repository && o.reload.control_mode != lifecycle::ControlMode::kNone) {
    return make_error(Error::Code::kInvalidArgument, "--model-control-mode poll|explicit needs --model-repository", "model_control_mode");
  }
  if (o.reload.control_mode == lifecycle::ControlMode::kExplicit && o.http.admin_port < 0) {
    return make_error(Error::Code::kInvalidArgument,
                      "--model-control-mode explicit takes its load calls on the admin port only: give --admin-port", "admin_port");
  }
  if (auto levels = o.service.batching.check(); !levels) {
    std::string flag = levels.error().field;
    std::replace(flag.begin(), flag.end(), '_', '-');
    return make_error(Error::Code::kInvalidArgument, "--" + flag + ": " + levels.error().message, levels.error().field);
  }
  return {};
}

}  // namespace

int serve(const ServeOptions& o, const std::string& version, const Runtime& runtime) {
  const std::string replica = supervisor::replica_name();
  configure_logging(replica.empty() ? "service" : replica, o.log.level, o.log.format);
  if (auto source = check_options(o); !source) return fail(source.error().message);
  const bool supervised = supervisor::supervised();
  const sigset_t signals = block_signals();

  auto report = place(o);
  if (!report) return fail(report.error().message);
  std::unique_ptr<lifecycle::Manager> manager;
  if (!o.reload.repository.empty()) {
    manager = std::make_unique<lifecycle::Manager>(o.reload, runtime.load, [&runtime] { runtime.prepare_worker_thread(1); });
  }
  auto models = manager ? manager->load_initial() : load_models(o, runtime);
  if (!models) return fail(models.error().message);
  if (manager) {
    for (const auto& m : *models) log_graph_report(*m);
  }
  report->runtime = runtime.summary();
  const std::size_t workers = report->plan.workers.size();
  http::Server server(transport_config(o, workers, supervised));
  auto store = open_store(o, *models, workers, server);
  if (!store) return fail(store.error().message);

  api::Parts parts{o.service, std::move(*report), std::move(*models), std::move(*store), runtime.prepare_worker_thread,
                   [&server](metrics::Gauges& g) { transport_gauges(server, g); }, [&server](std::size_t w) { server.wake(w); }};
  parts.config.version = version;
  parts.config.wait_for_group = supervised;
  auto made = api::Service::create(std::move(parts));
  if (!made) return fail(made.error().message);
  api::Service& service = **made;
  if (manager) service.attach(*manager);
  api::Router router(service, o.http.admin_port >= 0);
  if (auto started = start_serving(o, server, router); !started) return fail(started.error().message);
  if (auto warm = service.readiness().wait_until_warm(); !warm) {
    server.stop();
    return fail("warm-up failed: " + warm.error().message);
  }
  if (manager) {
    if (auto started = manager->start(service.lifecycle_hooks()); !started) {
      server.stop();
      return fail(started.error().message);
    }
  }
  log(LogLevel::kInfo, supervised ? "warm" : "ready", {{"summary", service.startup_summary()}});
  supervisor::report_ready();
  return drain(o, signals, server, service, manager.get());
}

int supervise(const ServeOptions& o, std::vector<std::string> command) {
  configure_logging("supervisor", o.log.level, o.log.format);
  if (auto checked = check_options(o); !checked) return fail(checked.error().message);  // once, not per replica
  if (o.http.port == 0 || o.http.admin_port == 0 || o.http.grpc_port == 0) {
    return fail("port 0 cannot be shared by replicas: give --port, --admin-port and --grpc-port a port each");
  }
  auto machine = read_machine();
  if (!machine) return fail(machine.error().message);
  auto slots = supervisor::plan_replicas(machine->placement, machine->topology, o.replicas);
  if (!slots) return fail(slots.error().message);
  supervisor::SupervisorConfig config = o.supervisor;
  config.command = std::move(command);
  config.grace_seconds = o.shutdown_grace + o.shutdown_delay + 5;
  return supervisor::run(*slots, config);
}

}  // namespace numaserve::startup
