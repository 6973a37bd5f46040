// numaserve-topology-agent: flags only; the work happens in numaserve::common
// and the agent's parts (discover, plan, publish, report).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "discover/discover.h"
#include "numaserve/common/quantity.h"
#include "plan/plan.h"
#include "plan/plan_output.h"
#include "publish/nrt.h"
#include "publish/yaml.h"
#include "report/report.h"

namespace {

using numaserve::TopologySource;
namespace discover = numaserve::agent::discover;
namespace plan = numaserve::agent::plan;
namespace publish = numaserve::agent::publish;

constexpr const char* kProgram = "numaserve-topology-agent";

// Where the node's description comes from; shared by every subcommand.
struct SourceOptions {
  std::string xml;
  std::string sysfs_root;
  std::string synthetic;
  std::string kubelet_config;
  std::string kubelet_state_dir;

  void add_to(CLI::App* cmd) {
    auto* x = cmd->add_option("--xml", xml, "Read an hwloc XML export instead of this machine")
                  ->check(CLI::ExistingFile);
    auto* s = cmd->add_option("--sysfs-root", sysfs_root,
                              "Read /sys and /proc under this directory (e.g. /host in a pod)")
                  ->check(CLI::ExistingDirectory);
    auto* y = cmd->add_option("--synthetic", synthetic,
                              "An hwloc synthetic description, e.g. \"pack:2 numa:1 core:4 pu:2\"");
    x->excludes(s, y);
    s->excludes(y);
    cmd->add_option("--kubelet-config", kubelet_config,
                    "The kubelet's KubeletConfiguration file, e.g. /var/lib/kubelet/config.yaml");
    cmd->add_option("--kubelet-state-dir", kubelet_state_dir,
                    "Directory with the kubelet's cpu_manager_state and memory_manager_state, e.g. /var/lib/kubelet");
  }

  discover::DiscoverConfig config() const {
    discover::DiscoverConfig out;
    if (!xml.empty()) out.source = TopologySource::xml(xml);
    if (!sysfs_root.empty()) out.source = TopologySource::sysfs(sysfs_root);
    if (!synthetic.empty()) out.source = TopologySource::synthetic(synthetic);
    if (!kubelet_config.empty()) out.kubelet_config = kubelet_config;
    if (!kubelet_state_dir.empty()) out.kubelet_state_dir = kubelet_state_dir;
    return out;
  }
};

int fail(const numaserve::Error& error) {
  std::cerr << kProgram << ": error: " << error.message << "\n";
  return 1;
}

int run_discover(const SourceOptions& from, bool json) {
  auto report = discover::discover_node(from.config());
  if (!report) return fail(report.error());
  if (json) {
    std::cout << nlohmann::json(*report).dump(2) << "\n";
  } else {
    std::cout << numaserve::agent::report::render_text(*report);
  }
  return 0;
}

int run_plan(const SourceOptions& from, const plan::PlanConfig& config, const std::string& output,
             const std::string& node_name) {
  auto report = discover::discover_node(from.config());
  if (!report) return fail(report.error());
  auto result = plan::plan_node(report->topology, config);
  if (!result) return fail(result.error());
  if (output == "json") {
    std::cout << nlohmann::json(*result).dump(2) << "\n";
  } else if (output == "yaml") {
    std::cout << publish::to_yaml(*result);
  } else if (output == "nrt") {
    std::cout << publish::to_yaml(publish::make_node_resource_topology(node_name, *report, *result));
  } else if (output == "labels") {
    for (const auto& [key, value] : publish::make_node_labels(*report, *result)) {
      std::cout << key << "=" << value << "\n";
    }
  } else if (output == "kubelet-config") {
    std::cout << plan::kubelet_config_yaml(*result);
  } else if (output == "helm-values") {
    std::cout << plan::helm_values_yaml(*result);
  } else {
    std::cout << plan::render_text(*result);
    for (const auto& warning : report->warnings) std::cout << "warning: " << warning << "\n";
  }
  return 0;
}

// The node's name as Kubernetes knows it: NODE_NAME from the downward API in
// the DaemonSet, else the host name (what the kubelet registers by default).
std::string default_node_name() {
  if (const char* name = std::getenv("NODE_NAME"); name != nullptr && *name != '\0') return name;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// A CLI11 option that takes a Kubernetes memory quantity ("1Gi").
void add_quantity(CLI::App* cmd, const std::string& flag, std::uint64_t& target, const std::string& help) {
  cmd->add_option_function<std::string>(
         flag,
         [&target, flag](const std::string& text) {
           auto bytes = numaserve::parse_quantity(text);
           if (!bytes) throw CLI::ValidationError(flag, bytes.error().message);
           target = *bytes;
         },
         help + " (default " + numaserve::format_quantity(target) + ")")
      ->type_name("QUANTITY");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"numaserve-topology-agent: NUMA topology of a Kubernetes node, and how to use it"};
  app.require_subcommand(1);

  SourceOptions discover_from;
  bool json = false;
  auto* discover = app.add_subcommand("discover", "Print NUMA nodes, CPUs, cores, memory, distances and "
                                                  "this process's placement");
  discover_from.add_to(discover);
  discover->add_flag("--json", json, "Print JSON instead of text");

  SourceOptions plan_from;
  plan::PlanConfig config;
  std::string output = "text";
  auto* plan_cmd = app.add_subcommand("plan", "Kubelet CPU/Memory/Topology Manager settings and the pod "
                                              "size that fits one replica on each NUMA node");
  plan_from.add_to(plan_cmd);
  std::string node_name = default_node_name();
  plan_cmd->add_option("--output,-o", output,
                       "text, json, yaml, nrt (NodeResourceTopology), labels, kubelet-config or helm-values")
      ->check(CLI::IsMember({"text", "json", "yaml", "nrt", "labels", "kubelet-config", "helm-values"}))
      ->capture_default_str();
  plan_cmd->add_option("--node-name", node_name, "Kubernetes node name for the NodeResourceTopology object")
      ->envname("NODE_NAME")
      ->capture_default_str();
  plan_cmd->add_option("--reserved-cores-per-node", config.reserved_cores_per_node,
                       "Whole physical cores kept for the system on every NUMA node")
      ->capture_default_str();
  add_quantity(plan_cmd, "--kube-reserved-memory", config.kube_reserved_memory, "kubeReserved memory");
  add_quantity(plan_cmd, "--system-reserved-memory", config.system_reserved_memory, "systemReserved memory");
  add_quantity(plan_cmd, "--eviction-hard-memory", config.eviction_hard_memory,
               "evictionHard memory.available");
  plan_cmd->add_option("--pod-memory-fraction", config.pod_memory_fraction,
                       "Share of a node's allocatable memory one replica asks for")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  plan_cmd->add_option("--replicas-per-numa-node", config.replicas_per_node,
                       "Replicas sharing one NUMA node")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any bad flag or value is a usage error (2), whatever
    // CLI11's internal code for it.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (discover->parsed()) return run_discover(discover_from, json);
  return run_plan(plan_from, config, output, node_name);
}
