#include "discover/discover.h"

#include "numaserve/common/text_file.h"
#include "numaserve/common/topology_json.h"

namespace numaserve::agent::discover {
namespace {

// Reads and parses one kubelet file; a failure becomes a warning.
template <typename T, typename Parse>
std::optional<T> read_kubelet_file(const std::filesystem::path& path, Parse parse,
                                   std::vector<std::string>& warnings) {
  auto text = read_text_file(path);
  if (!text) {
    warnings.push_back("kubelet file unreadable: " + text.error().message);
    return std::nullopt;
  }
  auto parsed = parse(*text, path.string());
  if (!parsed) {
    warnings.push_back("kubelet file ignored: " + parsed.error().message);
    return std::nullopt;
  }
  return *parsed;
}

void check_kubelet_config(const kubelet::KubeletConfig& config, std::vector<std::string>& warnings) {
  if (!config.unknown_fields.empty()) {
    std::string list;
    for (const auto& field : config.unknown_fields) list += (list.empty() ? "" : ", ") + field;
    warnings.push_back("KubeletConfiguration has unknown fields: " + list);
  }
  if (config.cpu_manager_policy != "static") {
    warnings.push_back("kubelet cpuManagerPolicy is '" + config.cpu_manager_policy +
                       "': Guaranteed pods share every CPU instead of getting exclusive ones; set 'static'");
  }
  if (config.topology_manager_policy != "single-numa-node") {
    warnings.push_back("kubelet topologyManagerPolicy is '" + config.topology_manager_policy +
                       "': a pod's CPUs and memory may span NUMA nodes; set 'single-numa-node'");
  }
  if (config.memory_manager_policy != "Static") {
    warnings.push_back("kubelet memoryManagerPolicy is '" + config.memory_manager_policy +
                       "': pod memory is not pinned to the pod's NUMA node; set 'Static'");
  }
}

}  // namespace

Result<NodeReport> discover_node(const DiscoverConfig& config) {
  auto topology = discover_topology(config.source);
  if (!topology) return tl::unexpected(topology.error());
  NodeReport report;
  report.topology = std::move(*topology);
  const auto& source = config.source;

  // The placement is this process's own, so it belongs with the live machine
  // only; for a captured tree Topology::allowed_* say what its cgroup allowed.
  if (source.kind == TopologySource::Kind::kLive) {
    if (auto placement = discover_placement()) {
      report.placement = *placement;
      for (auto& w : check_placement(*placement, &report.topology)) report.warnings.push_back(std::move(w));
    } else {
      report.warnings.push_back("placement unknown: " + placement.error().message);
    }
  }
  if (source.kind == TopologySource::Kind::kLive || source.kind == TopologySource::Kind::kSysfs) {
    const std::filesystem::path root = source.kind == TopologySource::Kind::kLive ? "/" : source.value;
    if (auto kernel = discover_kernel_settings(root)) {
      report.kernel = *kernel;
      for (auto& w : check_kernel_settings(*kernel)) report.warnings.push_back(std::move(w));
    } else {
      report.warnings.push_back("kernel settings unknown: " + kernel.error().message);
    }
  }
  if (config.kubelet_config) {
    report.kubelet_config = read_kubelet_file<kubelet::KubeletConfig>(
        *config.kubelet_config, kubelet::parse_kubelet_config, report.warnings);
    if (report.kubelet_config) check_kubelet_config(*report.kubelet_config, report.warnings);
  }
  if (config.kubelet_state_dir) {
    report.cpu_manager_state = read_kubelet_file<kubelet::CpuManagerState>(
        *config.kubelet_state_dir / "cpu_manager_state", kubelet::parse_cpu_manager_state, report.warnings);
    report.memory_manager_state = read_kubelet_file<kubelet::MemoryManagerState>(
        *config.kubelet_state_dir / "memory_manager_state", kubelet::parse_memory_manager_state,
        report.warnings);
  }
  return report;
}

void to_json(nlohmann::json& j, const NodeReport& report) {
  nlohmann::json kernel;
  if (report.kernel) {
    const auto& k = *report.kernel;
    kernel = {{"numa_balancing", k.numa_balancing ? nlohmann::json(*k.numa_balancing) : nlohmann::json()},
              {"transparent_hugepage", k.transparent_hugepage},
              {"transparent_hugepage_defrag", k.transparent_hugepage_defrag},
              {"isolated_cpus", k.isolated_cpus},
              {"nohz_full_cpus", k.nohz_full_cpus}};
  }
  nlohmann::json kubelet_json;
  if (const auto& k = report.kubelet_config) {
    kubelet_json["config"] = {{"cpu_manager_policy", k->cpu_manager_policy},
                              {"cpu_manager_policy_options", k->cpu_manager_policy_options},
                              {"topology_manager_policy", k->topology_manager_policy},
                              {"topology_manager_scope", k->topology_manager_scope},
                              {"topology_manager_policy_options", k->topology_manager_policy_options},
                              {"memory_manager_policy", k->memory_manager_policy},
                              {"reserved_system_cpus", k->reserved_system_cpus}};
  }
  if (const auto& c = report.cpu_manager_state) {
    kubelet_json["cpu_manager_state"] = {
        {"policy", c->policy}, {"default_cpu_set", c->default_cpu_set}, {"exclusive_cpus", c->exclusive_cpus}};
  }
  if (const auto& m = report.memory_manager_state) {
    nlohmann::json assigned = nlohmann::json::object();
    for (const auto& [node, bytes] : m->assigned_memory) assigned[std::to_string(node)] = bytes;
    kubelet_json["memory_manager_state"] = {{"policy", m->policy}, {"assigned_memory_bytes", assigned}};
  }
  j = {{"topology", report.topology},
       {"placement", report.placement ? nlohmann::json(*report.placement) : nlohmann::json()},
       {"kernel", kernel},
       {"kubelet", kubelet_json},
       {"warnings", report.warnings}};
}

}  // namespace numaserve::agent::discover
