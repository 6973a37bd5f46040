// numaserve-topology-agent: flags only. Options are declared once, in
// agent_options(); the work happens in numaserve::common and the agent's
// parts (discover, plan, publish, report, serve, updater).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>

#include "discover/discover.h"
#include "numaserve/common/log.h"
#include "numaserve/common/options.h"
#include "options/agent_options.h"
#include "plan/plan.h"
#include "plan/plan_output.h"
#include "publish/nrt.h"
#include "publish/yaml.h"
#include "numaserve/common/text_file.h"
#include "publish/files.h"
#include "report/report.h"
#include "report/svg.h"
#include "serve/metrics.h"
#include "http/http.h"
#include "updater/loop.h"
#include "updater/updater.h"

namespace {

using numaserve::LogLevel;
using numaserve::Status;
using numaserve::TopologySource;
namespace discover = numaserve::agent::discover;
namespace plan = numaserve::agent::plan;
namespace publish = numaserve::agent::publish;
namespace http = numaserve::agent::http;
namespace serve = numaserve::agent::serve;
namespace updater = numaserve::agent::updater;
using numaserve::agent::options::AgentOptions;
using numaserve::agent::options::kPlan;
using numaserve::agent::options::kRun;
using numaserve::agent::options::kSource;
using numaserve::agent::options::table_for;

constexpr const char* kProgram = "numaserve-topology-agent";

int fail(const std::string& message) {
  std::cerr << kProgram << ": error: " << message << "\n";
  return 1;
}

// Writes the node's picture when --svg asked for one.
int write_svg(const std::string& path, const discover::NodeReport& report, const std::optional<plan::Plan>& plan) {
  if (path.empty()) return 0;
  const std::filesystem::path file(path);
  auto written = publish::write_if_changed(file.has_parent_path() ? file.parent_path() : ".", file.filename().string(),
                                           numaserve::agent::report::render_svg(report, plan));
  return written ? 0 : fail(written.error().message);
}

int run_discover(const AgentOptions& o, bool json, const std::string& svg) {
  auto report = discover::discover_node(o.discover_config());
  if (!report) return fail(report.error().message);
  if (int rc = write_svg(svg, *report, std::nullopt); rc != 0) return rc;
  if (json) {
    std::cout << nlohmann::json(*report).dump(2) << "\n";
  } else {
    std::cout << numaserve::agent::report::render_text(*report);
  }
  return 0;
}

int run_plan(const AgentOptions& o, const std::string& output, const std::string& svg) {
  auto report = discover::discover_node(o.discover_config());
  if (!report) return fail(report.error().message);
  auto result = plan::plan_node(report->topology, o.plan);
  // The NodeResourceTopology and the labels describe the machine with or
  // without a plan, as the agent publishes them.
  const plan::Plan* planned = result ? &*result : nullptr;
  if (output == "nrt") {
    std::cout << publish::to_yaml(publish::make_node_resource_topology(o.node_name, *report, planned, o.fingerprint_method));
  } else if (output == "labels") {
    for (const auto& [key, value] : publish::make_node_labels(*report, planned)) {
      std::cout << key << "=" << value << "\n";
    }
  }
  if (!result) return fail(result.error().message);
  if (int rc = write_svg(svg, *report, *result); rc != 0) return rc;
  if (output == "json") {
    std::cout << nlohmann::json(*result).dump(2) << "\n";
  } else if (output == "yaml") {
    std::cout << publish::to_yaml(*result);
  } else if (output == "kubelet-config") {
    std::cout << plan::kubelet_config_yaml(*result);
  } else if (output == "helm-values") {
    std::cout << plan::helm_values_yaml(*result);
  } else if (output == "text") {
    std::cout << plan::render_text(*result);
    for (const auto& warning : report->warnings) std::cout << "warning: " << warning << "\n";
  }
  return 0;
}

// The DaemonSet: the endpoint, then updater::run_loop until SIGTERM.
int run_agent(const AgentOptions& o) {
  numaserve::configure_logging("agent", o.log.level, o.log.format);
  updater::UpdaterConfig config;
  config.discover = o.discover_config();
  config.plan = o.plan;
  config.node_name = o.node_name;
  config.hints_dir = o.hints_dir;
  config.fingerprint_method = o.fingerprint_method;
  if (!o.kubelet_dropin_dir.empty()) config.kubelet_dropin_dir = o.kubelet_dropin_dir;
  config.publish = !o.no_publish;
  if (!o.no_apiserver) {
    config.apiserver = numaserve::agent::apiserver::in_cluster_config();
    if (!o.apiserver_url.empty()) {
      if (!config.apiserver) config.apiserver.emplace();
      config.apiserver->url = o.apiserver_url;
    }
    if (config.apiserver) {
      if (!o.apiserver_ca_file.empty()) config.apiserver->ca_file = o.apiserver_ca_file;
      if (!o.apiserver_token_file.empty()) config.apiserver->token_file = o.apiserver_token_file;
      numaserve::log(LogLevel::kInfo, "apiserver", {{"url", config.apiserver->url}});
    }
  }
  updater::Updater agent(config);

  // Signals are read by the loop's signalfd, so every thread (the HTTP
  // server's included, started after this) must block them.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  http::StatusServer server;
  if (!o.oneshot) {
    if (auto started = server.start(o.listen_address, static_cast<int>(o.port)); !started) {
      return fail(started.error().message);
    }
    numaserve::log(LogLevel::kInfo, "listening", {{"address", o.listen_address}, {"port", std::to_string(server.port())}});
  }
  auto report_cycle = [&](const updater::CycleResult& result, const std::string& reason) {
    server.publish(serve::snapshot_of(result, agent.counters()));
    for (const auto& error : result.errors) numaserve::log(LogLevel::kError, error);
    if (result.report) {
      for (const auto& w : result.report->warnings) numaserve::log(LogLevel::kWarning, w);
    }
    numaserve::log(LogLevel::kInfo, "cycle",
                   {{"ok", result.ok() ? "true" : "false"},
                    {"reason", reason},
                    {"cycles", std::to_string(agent.counters().cycles)},
                    {"files_changed", std::to_string(agent.counters().files_changed)}});
  };
  if (o.oneshot) {
    const auto result = agent.run_cycle();
    report_cycle(result, "oneshot");
    return result.ok() ? 0 : 1;
  }
  updater::LoopConfig loop;
  loop.interval = std::chrono::duration<double>(o.interval_seconds);
  loop.max_events_per_second = o.max_events_per_second;
  loop.watched = updater::kubelet_watches(config.discover);
  auto ran = updater::run_loop(agent, loop, report_cycle);
  server.stop();
  return ran ? 0 : fail(ran.error().message);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"numaserve-topology-agent: NUMA topology of a Kubernetes node, and how to use it"};
  app.require_subcommand(1);
  AgentOptions options;

  auto* discover_cmd = app.add_subcommand("discover", "Print NUMA nodes, CPUs, cores, memory, distances, kernel "
                                                      "and kubelet settings, and this process's placement");
  auto discover_table = table_for(options, kSource);
  discover_table.add_to(*discover_cmd);
  bool json = false;
  discover_cmd->add_flag("--json", json, "Print JSON instead of text");
  std::string svg;
  discover_cmd->add_option("--svg", svg, "Also draw the node into this SVG file");

  auto* plan_cmd = app.add_subcommand("plan", "Kubelet CPU/Memory/Topology Manager settings and the pod size "
                                              "that fits one replica on each NUMA node");
  auto plan_table = table_for(options, kSource | kPlan);
  plan_table.add_to(*plan_cmd);
  std::string output = "text";
  plan_cmd->add_option("--output,-o", output,
                       "text, json, yaml, nrt (NodeResourceTopology), labels, kubelet-config or helm-values")
      ->check(CLI::IsMember({"text", "json", "yaml", "nrt", "labels", "kubelet-config", "helm-values"}))
      ->capture_default_str();
  plan_cmd->add_option("--svg", svg, "Also draw the node, reserved CPUs and replica slots into this SVG file");

  auto* run_cmd = app.add_subcommand("run", "The DaemonSet agent: discover, plan and publish on an interval; "
                                            "serve /topology, /plan, /metrics, /healthz");
  auto run_table = table_for(options, kSource | kPlan | kRun);
  run_table.add_to(*run_cmd);

  auto* options_cmd = app.add_subcommand("options", "Print every option as a Markdown table (for the README)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any bad flag or value is a usage error (2), whatever
    // CLI11's internal code for it.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (options_cmd->parsed()) {
    std::cout << table_for(options, kSource | kPlan | kRun).markdown();
    return 0;
  }
  auto& table = discover_cmd->parsed() ? discover_table : plan_cmd->parsed() ? plan_table : run_table;
  if (auto applied = table.apply(); !applied) {
    std::cerr << kProgram << ": " << applied.error().message << "\n";
    return 2;
  }
  if ((!options.xml.empty()) + (!options.sysfs_root.empty()) + (!options.synthetic.empty()) > 1) {
    std::cerr << kProgram << ": --xml, --sysfs-root and --synthetic exclude each other\n";
    return 2;
  }
  if (discover_cmd->parsed()) return run_discover(options, json, svg);
  if (plan_cmd->parsed()) return run_plan(options, output, svg);
  return run_agent(options);
}
