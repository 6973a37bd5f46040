// numaserve: flags only. Options are declared once, in serve_options(); the
// start-up order is the point of this file:
//   placement -> thread plan -> memory policy + pin -> load store and models
//   -> HTTP up (live, not ready) -> workers pin themselves and warm up -> ready
//   -> SIGTERM: not ready, stop accepting, answer what was accepted, exit 0.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>
#include <thread>

#include "api/service.h"
#include "features/feature_store.h"
#include "http/probe.h"
#include "http/server.h"
#include "model/demo_models.h"
#include "model/model.h"
#include "options/serve_options.h"
#include "numaserve/common/log.h"
#include "numaserve/common/options.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/quantity.h"
#include "numaserve/common/topology.h"
#include "numa/numa.h"
#include "threads/threads.h"
#include "supervisor/supervisor.h"

namespace {

using numaserve::LogLevel;
using numaserve::Status;
using numaserve::serve::ServeOptions;

constexpr const char* kProgram = "numaserve";
constexpr const char* kVersion = "0.1.0";

int fail(const std::string& message) {
  numaserve::log(LogLevel::kError, message);
  return 1;
}

// Who answers: host/pid, and the worker's slot under the supervisor.
std::string instance_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const char* worker = std::getenv("NUMASERVE_WORKER");
  return std::string(host) + "/" + std::to_string(getpid()) + (worker != nullptr ? std::string(" ") + worker : "");
}

void configure_logging(const ServeOptions& o, const std::string& component) {
  numaserve::configure_logging(component, o.log.level, o.log.format);
}

// Where this process may run, and the machine around it: what both the
// supervisor and a service plan from.
struct Machine {
  numaserve::Placement placement;
  numaserve::Topology topology;
};

numaserve::Result<Machine> read_machine() {
  auto placement = numaserve::discover_placement("/");
  if (!placement) {
    return tl::unexpected(std::move(placement.error()).with_context("reading this process's placement"));
  }
  auto topology = numaserve::discover_topology(numaserve::TopologySource::live());
  if (!topology) return tl::unexpected(std::move(topology.error()).with_context("reading the machine's topology"));
  return Machine{std::move(*placement), std::move(*topology)};
}

// --replicas-per-numa-node / --replicas: plan the slots inside this
// process's cpuset and supervise one worker per slot; each worker runs this
// same command line and knows it is one from its environment.
int supervise(const ServeOptions& o, int argc, char** argv) {
  configure_logging(o, "supervisor");
  if (o.port == 0) return fail("--port 0 cannot be shared by replicas: give a port");
  auto machine = read_machine();
  if (!machine) return fail(machine.error().message);
  auto slots = numaserve::supervisor::plan_replicas(machine->placement, machine->topology, o.replicas);
  if (!slots) return fail(slots.error().message);
  numaserve::supervisor::SupervisorConfig config;
  config.command = {"/proc/self/exe"};
  for (int i = 1; i < argc; ++i) config.command.emplace_back(argv[i]);
  config.max_restarts = o.max_restarts;
  config.grace_seconds = o.shutdown_grace + o.shutdown_delay + 5;
  return numaserve::supervisor::run(*slots, config);
}

int serve(const ServeOptions& o) {
  const char* worker = std::getenv("NUMASERVE_WORKER");
  configure_logging(o, worker != nullptr ? worker : "service");
  if (o.model_dirs.empty()) return fail("no model: give --model-dir DIR (a directory with model.pt and model.yaml)");

  // Signals are taken by sigwait below; every thread started later inherits
  // the block, so none of them is interrupted by SIGTERM.
  // SIGUSR1 is the supervisor opening the group (see supervisor.h).
  const bool supervised = numaserve::supervisor::supervised();
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Placement first: nothing is allocated or started before we know where.
  auto machine = read_machine();
  if (!machine) return fail(machine.error().message);
  const auto& placement = machine->placement;
  auto plan = numaserve::threads::plan_threads(placement, machine->topology, o.threads);
  if (!plan) return fail(plan.error().message);
  for (const auto& note : plan->notes) numaserve::log(LogLevel::kWarning, note);

  numaserve::api::PlacementReport report;
  report.plan = *plan;
  report.cgroup = placement.cgroup;
  report.instance = instance_name();
  if (o.memory_bind) {
    report.memory_policy = numaserve::numa::bind_memory(plan->memory_nodes);
    if (!report.memory_policy.applied) numaserve::log(LogLevel::kWarning, report.memory_policy.reason);
  } else {
    report.memory_policy.reason = "disabled by --memory-bind=false";
  }
  // This thread loads the weights (first touch) and starts every other
  // thread: pinned to the cpuset, they all inherit it.
  if (auto bound = numaserve::numa::bind_current_thread(plan->cpus); !bound) return fail(bound.error().message);

  std::unique_ptr<numaserve::features::FeatureStore> store;
  if (o.feature_store.empty()) {
    store = std::move(*numaserve::features::EmbeddedFeatureStore::parse("", "no store"));
  } else {
    auto loaded = numaserve::features::EmbeddedFeatureStore::load(o.feature_store);
    if (!loaded) return fail(loaded.error().message);
    numaserve::log(LogLevel::kInfo, "feature store loaded",
                   {{"file", o.feature_store}, {"users", std::to_string((*loaded)->users())},
                    {"items", std::to_string((*loaded)->items())}});
    store = std::move(*loaded);
  }
  std::vector<std::unique_ptr<numaserve::model::Model>> models;
  for (const auto& dir : o.model_dirs) {
    auto loaded = numaserve::model::Model::load(dir);
    if (!loaded) return fail(loaded.error().message);
    for (const auto& m : models) {
      if (m->spec().name == (*loaded)->spec().name) return fail(dir + ": a model named " + m->spec().name + " is already served");
    }
    models.push_back(std::move(*loaded));
  }
  report.runtime = numaserve::model::runtime_summary();

  numaserve::api::ServiceConfig config;
  config.limits.max_items = o.max_items;
  config.batching.queue_capacity = o.queue_capacity;
  config.batching.max_queue_delay =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(o.max_queue_delay));
  config.batching.max_batch_items = o.max_batch_items;
  config.batching.max_batch_delay = std::chrono::microseconds(o.max_batch_delay_us);
  config.warmup_rounds = o.warmup_rounds;
  config.version = kVersion;
  config.wait_for_group = supervised;

  numaserve::http::ServerConfig http;
  http.host = o.listen_address;
  http.port = static_cast<int>(o.port);
  http.admin_port = o.admin_port;
  http.loops = plan->workers.size();
  http.max_connections = o.max_connections;
  http.header_timeout_seconds = o.header_timeout;
  http.body_timeout_seconds = o.body_timeout;
  http.idle_timeout_seconds = o.idle_timeout;
  http.max_header_bytes = o.max_header_bytes;
  http.max_body_bytes = o.max_body_bytes;
  http.reuse_port = o.reuse_port || supervised;
  numaserve::http::Server server(http);
  numaserve::api::Service service(config, std::move(report), std::move(models), std::move(store), server);
  // The workers are the server's event loops: from here each pins itself
  // and warms the models up while its loop already answers /healthz.
  if (auto started = server.start(service); !started) return fail(started.error().message);
  numaserve::log(LogLevel::kInfo, "listening (live, not ready until warm)",
                 {{"address", o.listen_address}, {"port", std::to_string(server.port())},
                  {"admin_port", server.admin_port() < 0 ? "none" : std::to_string(server.admin_port())},
                  {"max_connections", std::to_string(server.max_connections())}});
  if (auto warm = service.wait_until_warm(); !warm) {
    server.stop();
    return fail("warm-up failed: " + warm.error().message);
  }
  numaserve::log(LogLevel::kInfo, supervised ? "warm" : "ready", {{"summary", service.startup_summary()}});
  numaserve::supervisor::report_ready();

  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGUSR1) {
    service.open_group();
    numaserve::log(LogLevel::kInfo, "ready: the group is open");
  }
  numaserve::log(LogLevel::kInfo, "draining", {{"signal", signal == SIGTERM ? "SIGTERM" : "SIGINT"}});
  service.begin_drain();
  // The drain must end within the grace period even if a client stalls.
  std::thread([grace = o.shutdown_grace + o.shutdown_delay] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    numaserve::log(LogLevel::kError, "shutdown grace period over; exiting with requests unanswered");
    _exit(1);
  }).detach();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.shutdown_delay));
  server.stop();
  numaserve::log(LogLevel::kInfo, "stopped");
  return 0;
}

// Where `numaserve health` looks: the admin port when there is one, as the
// service itself was told through the environment.
int default_health_port() {
  for (const char* name : {"NUMASERVE_ADMIN_PORT", "NUMASERVE_PORT"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0' && std::string(value) != "none") return std::atoi(value);
  }
  return 8080;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"numaserve: a NUMA-aware LibTorch ranking service"};
  app.require_subcommand(1);
  ServeOptions options;

  auto* serve_cmd = app.add_subcommand("serve", "Serve models over HTTP: POST /predict, KServe v2, /placement, /metrics");
  numaserve::OptionTable table(numaserve::serve::serve_options(options));
  table.add_to(*serve_cmd);

  auto* demo_cmd = app.add_subcommand("make-demo-models", "Write DIR/ranker_a, DIR/ranker_b and DIR/store.jsonl");
  std::string demo_dir;
  numaserve::model::DemoConfig demo;
  demo_cmd->add_option("dir", demo_dir, "Output directory")->required();
  demo_cmd->add_option("--embedding-mb", demo.embedding_mb, "ranker_a's embedding tables in MiB")->capture_default_str();
  demo_cmd->add_option("--users", demo.users, "Users in the feature store")->capture_default_str();
  demo_cmd->add_option("--items", demo.items, "Items in the feature store")->capture_default_str();
  demo_cmd->add_option("--seed", demo.seed, "Seed of weights and store")->capture_default_str();

  auto* options_cmd = app.add_subcommand("options", "Print serve's options as a Markdown table (for the README)");

  // The image's HEALTHCHECK: no shell, no curl in the image.
  auto* health_cmd = app.add_subcommand("health", "GET a path of the running service on loopback; exit 0 on 200");
  int health_port = default_health_port();
  std::string health_path = "/readyz";
  double health_timeout = 3;
  health_cmd->add_option("--port", health_port, "Port (default: NUMASERVE_ADMIN_PORT, else NUMASERVE_PORT, else 8080)")
      ->capture_default_str();
  health_cmd->add_option("--path", health_path, "Path to GET")->capture_default_str();
  health_cmd->add_option("--timeout", health_timeout, "Seconds to wait for the status line")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (options_cmd->parsed()) {
    std::cout << table.markdown();
    return 0;
  }
  if (health_cmd->parsed()) {
    auto status = numaserve::http::probe(health_port, health_path, health_timeout);
    if (!status || *status != 200) {
      std::cerr << kProgram << ": " << (status ? health_path + " answered " + std::to_string(*status) : status.error().message)
                << "\n";
      return 1;
    }
    return 0;
  }
  if (demo_cmd->parsed()) {
    if (auto made = numaserve::model::make_demo_models(demo_dir, demo); !made) {
      std::cerr << kProgram << ": " << made.error().message << "\n";
      return 1;
    }
    std::cout << "wrote " << demo_dir << "/ranker_a, " << demo_dir << "/ranker_b, " << demo_dir << "/store.jsonl\n";
    return 0;
  }
  if (auto applied = table.apply(); !applied) {
    std::cerr << kProgram << ": " << applied.error().message << "\n";
    return 2;
  }
  const bool replicated = options.replicas.per_node != 0 || options.replicas.replicas != 0;
  if (replicated && !numaserve::supervisor::supervised()) return supervise(options, argc, argv);
  return serve(options);
}
