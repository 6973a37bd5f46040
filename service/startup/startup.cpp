#include "startup/startup.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "api/service.h"
#include "feast/store.h"
#include "features/feature_store.h"
#include "http/server.h"
#include "model/model.h"
#include "numa/numa.h"
#include "numaserve/common/log.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"
#include "supervisor/supervisor.h"
#include "threads/threads.h"

namespace numaserve::startup {
namespace {

using serve::ServeOptions;

int fail(const std::string& message) {
  log(LogLevel::kError, message);
  return 1;
}

// Who answers: host/pid, and the worker's slot under the supervisor.
std::string instance_name() {
  const std::string worker = supervisor::worker_name();
  return host_name() + "/" + std::to_string(getpid()) + (worker.empty() ? "" : " " + worker);
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

// The embedded store: a JSON Lines file, loaded now. With a Redis URL (or
// none) it is empty, and every query goes to Redis (open_remote_store).
Result<std::unique_ptr<features::FeatureStore>> load_store(const ServeOptions& o) {
  if (o.feature_store.empty() || redis::is_url(o.feature_store)) return features::EmbeddedFeatureStore::parse("", "no store");
  auto loaded = features::EmbeddedFeatureStore::load(o.feature_store);
  if (!loaded) return tl::unexpected(loaded.error());
  log(LogLevel::kInfo, "feature store loaded",
      {{"file", o.feature_store}, {"users", std::to_string((*loaded)->users())},
       {"items", std::to_string((*loaded)->items())}});
  return std::unique_ptr<features::FeatureStore>(std::move(*loaded));
}

Result<std::vector<std::unique_ptr<model::Model>>> load_models(const ServeOptions& o) {
  std::vector<std::unique_ptr<model::Model>> models;
  for (const auto& dir : o.model_dirs) {
    auto loaded = model::Model::load(dir);
    if (!loaded) return tl::unexpected(loaded.error());
    for (const auto& m : models) {
      if (m->spec().name == (*loaded)->spec().name) {
        return make_error(Error::Code::kInvalidArgument, dir + ": a model named " + m->spec().name + " is already served",
                          "model_dir");
      }
    }
    models.push_back(std::move(*loaded));
  }
  return models;
}

// Feast's Redis online store, one client per worker on its event loop;
// checked by connecting once now. Null without a Redis URL.
Result<std::unique_ptr<features::RemoteStore>> open_remote_store(const ServeOptions& o,
                                                                 const std::vector<std::unique_ptr<model::Model>>& models,
                                                                 std::size_t workers, http::Server& server) {
  if (!redis::is_url(o.feature_store)) return nullptr;
  auto url = redis::parse_url(o.feature_store, o.feature_store_password_file);
  if (!url) return tl::unexpected(url.error());
  std::vector<const features::ModelSpec*> specs;
  for (const auto& m : models) specs.push_back(&m->spec());
  auto store = feast::open_store(*url, specs, o.store, workers,
                                 [&server](std::size_t worker) -> boost::asio::io_context& { return server.context(worker); });
  if (!store) return tl::unexpected(store.error());
  log(LogLevel::kInfo, "feature store: Feast's Redis online store",
      {{"store", url->redacted()}, {"project", specs.front()->store.project},
       {"timeout", std::to_string(o.store.client.timeout_seconds) + "s"},
       {"on_error", o.store.fail_on_error ? "fail" : "default"}});
  return std::unique_ptr<features::RemoteStore>(std::move(*store));
}

// HTTP up with one event loop per worker: from here each worker pins
// itself and warms the models up while its loop already answers /healthz.
Status start_serving(const ServeOptions& o, http::Server& server, api::Service& service) {
  if (auto started = server.start(service); !started) return started;
  log(LogLevel::kInfo, "listening (live, not ready until warm)",
      {{"address", o.http.host}, {"port", std::to_string(server.port())},
       {"admin_port", server.admin_port() < 0 ? "none" : std::to_string(server.admin_port())},
       {"max_connections", std::to_string(server.max_connections())}});
  return {};
}

// Ready until SIGTERM (SIGUSR1 opens the supervisor's group), then the drain,
// which must end within the grace period even if a client stalls.
void drain(const ServeOptions& o, const sigset_t& signals, http::Server& server, api::Service& service) {
  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGUSR1) {
    service.open_group();
    log(LogLevel::kInfo, "ready: the group is open");
  }
  log(LogLevel::kInfo, "draining", {{"signal", signal == SIGTERM ? "SIGTERM" : "SIGINT"}});
  service.begin_drain();
  std::thread([grace = o.shutdown_grace + o.shutdown_delay] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    log(LogLevel::kError, "shutdown grace period over; exiting with requests unanswered");
    _exit(1);
  }).detach();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.shutdown_delay));
  server.stop();
  log(LogLevel::kInfo, "stopped");
}

}  // namespace

int serve(const ServeOptions& o, const std::string& version) {
  const std::string worker = supervisor::worker_name();
  configure_logging(worker.empty() ? "service" : worker, o.log.level, o.log.format);
  if (o.model_dirs.empty()) return fail("no model: give --model-dir DIR (a directory with model.pt and model.yaml)");
  const bool supervised = supervisor::supervised();
  const sigset_t signals = block_signals();

  // Placement first: nothing is allocated or started before we know where.
  auto machine = read_machine();
  if (!machine) return fail(machine.error().message);
  auto plan = threads::plan_threads(machine->placement, machine->topology, o.threads);
  if (!plan) return fail(plan.error().message);
  for (const auto& note : plan->notes) log(LogLevel::kWarning, note);
  auto report = bind(o, *machine, *plan);
  if (!report) return fail(report.error().message);

  auto store = load_store(o);
  if (!store) return fail(store.error().message);
  auto models = load_models(o);
  if (!models) return fail(models.error().message);
  report->runtime = model::runtime_summary();

  api::ServiceConfig config = o.service;
  config.version = version;
  config.wait_for_group = supervised;
  http::ServerConfig transport = o.http;
  transport.loops = plan->workers.size();
  transport.reuse_port = o.http.reuse_port || supervised;
  http::Server server(transport);
  auto remote = open_remote_store(o, *models, plan->workers.size(), server);
  if (!remote) return fail(remote.error().message);
  api::Service service(config, std::move(*report), std::move(*models), std::move(*store), server, std::move(*remote));
  if (auto started = start_serving(o, server, service); !started) return fail(started.error().message);

  if (auto warm = service.wait_until_warm(); !warm) {
    server.stop();
    return fail("warm-up failed: " + warm.error().message);
  }
  log(LogLevel::kInfo, supervised ? "warm" : "ready", {{"summary", service.startup_summary()}});
  supervisor::report_ready();
  drain(o, signals, server, service);
  return 0;
}

int supervise(const ServeOptions& o, std::vector<std::string> command) {
  configure_logging("supervisor", o.log.level, o.log.format);
  if (o.http.port == 0) return fail("--port 0 cannot be shared by replicas: give a port");
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
