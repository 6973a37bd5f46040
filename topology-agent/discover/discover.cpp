#include "discover/discover.h"

#include <set>

#include "numaserve/common/text_file.h"
#include "numaserve/common/topology_json.h"

namespace numaserve::agent::discover {
namespace {

// Reads and parses one kubelet file. One that is absent is a warning (the
// kubelet writes a state file only with its manager's policy on); one that
// is there but cannot be read or parsed is also an error of the report's,
// which the updater counts.
template <typename T, typename Parse>
std::optional<T> read_kubelet_file(const std::filesystem::path& path, Parse parse, NodeReport& report) {
  auto text = read_text_file(path);
  if (!text) {
    report.warnings.push_back("kubelet file unreadable: " + text.error().message);
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) report.kubelet_file_errors.push_back(text.error());
    return std::nullopt;
  }
  auto parsed = parse(*text, path.string());
  if (!parsed) {
    report.warnings.push_back("kubelet file ignored: " + parsed.error().message);
    report.kubelet_file_errors.push_back(parsed.error());
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

// The API's ids checked against the machine: a CPU or NUMA node it does not
// have (a kubelet that saw another machine, a bug) is named and left out
// rather than published as capacity nobody has.
void keep_on_machine(kubelet::Allocations& allocations, const Topology& topology,
                     std::vector<std::string>& warnings) {
  const CpuSet cpus = topology.online_cpus;
  const NodeSet nodes = topology.node_ids();
  auto check_memory = [&](std::vector<kubelet::MemoryBlock>& blocks, const std::string& whose) {
    for (auto& block : blocks) {
      if (const NodeSet stray = block.nodes - nodes; !stray.empty()) {
        warnings.push_back("PodResources: " + whose + " has " + block.resource + " on NUMA node(s) " +
                           stray.to_list() + ", which this machine does not have; left out");
        block.nodes -= stray;
      }
    }
  };
  if (allocations.allocatable) {
    if (const CpuSet stray = allocations.allocatable->cpus - cpus; !stray.empty()) {
      warnings.push_back("PodResources: allocatable CPU(s) " + stray.to_list() +
                         " are not online on this machine; left out");
      allocations.allocatable->cpus -= stray;
    }
    check_memory(allocations.allocatable->memory, "the allocatable set");
  }
  for (auto& pod : allocations.pods) {
    for (auto& container : pod.containers) {
      const std::string whose = "pod " + pod.pod_namespace + "/" + pod.name + " container " + container.name;
      if (const CpuSet stray = container.cpus - cpus; !stray.empty()) {
        warnings.push_back("PodResources: " + whose + " holds CPU(s) " + stray.to_list() +
                           ", which are not online on this machine; left out");
        container.cpus -= stray;
      }
      check_memory(container.memory, whose);
    }
  }
  // Totals again, from the checked pods.
  allocations = kubelet::allocations_of_pods(std::move(allocations.source), std::move(allocations.allocatable),
                                             std::move(allocations.pods));
}

// The pods of the state files that the kubelet no longer runs: the kubelet
// keeps a directory per pod it runs (pods/UID in its root dir) and removes it
// once the pod is gone, while the Memory Manager's entries stay until its
// next admission. Without that directory (only the files mounted), none.
std::set<std::string> ended_pods(const std::filesystem::path& state_dir, const NodeReport& report) {
  std::set<std::string> ended;
  std::error_code error;
  if (!std::filesystem::is_directory(state_dir / "pods", error)) return ended;
  auto check = [&](const std::string& uid) {
    if (!std::filesystem::exists(state_dir / "pods" / uid, error)) ended.insert(uid);
  };
  if (report.cpu_manager_state) {
    for (const auto& [uid, cpus] : report.cpu_manager_state->pods) check(uid);
  }
  if (report.memory_manager_state) {
    for (const auto& [uid, bytes] : report.memory_manager_state->pods) check(uid);
  }
  return ended;
}

// What pods hold: the API when its socket is there; the state files otherwise.
void discover_allocations(const DiscoverConfig& config, NodeReport& report) {
  if (config.podresources && std::filesystem::exists(config.podresources->socket)) {
    podresources::QueryStats stats;
    auto allocations = podresources::query(*config.podresources, &stats);
    report.podresources_retries = stats.retries;
    if (!allocations) {
      report.allocations_error = allocations.error().message;
      report.warnings.push_back(allocations.error().message);
      return;
    }
    keep_on_machine(*allocations, report.topology, report.warnings);
    report.allocations = std::move(*allocations);
    return;
  }
  if (!config.kubelet_state_dir) {
    // A socket configured and not there (a kubelet restarting, or not up
    // yet) is a view that could not be read, not a machine without pods:
    // the updater then publishes its last good one, marked stale.
    if (config.podresources) {
      report.allocations_error = "no PodResources socket at " + config.podresources->socket.string();
      report.warnings.push_back(report.allocations_error);
    }
    return;
  }
  if (config.podresources) {
    report.warnings.push_back("no PodResources socket at " + config.podresources->socket.string() +
                              "; reading the kubelet's state files in " + config.kubelet_state_dir->string() +
                              " instead (internal to the kubelet, and without pod names)");
  }
  report.cpu_manager_state = read_kubelet_file<kubelet::CpuManagerState>(
      *config.kubelet_state_dir / "cpu_manager_state", kubelet::parse_cpu_manager_state, report);
  report.memory_manager_state = read_kubelet_file<kubelet::MemoryManagerState>(
      *config.kubelet_state_dir / "memory_manager_state", kubelet::parse_memory_manager_state, report);
  if (report.cpu_manager_state || report.memory_manager_state) {
    report.allocations =
        kubelet::allocations_of_state_files(config.kubelet_state_dir->string(), report.cpu_manager_state,
                                            report.memory_manager_state, ended_pods(*config.kubelet_state_dir, report));
  }
}

// Per NUMA node, who holds what there: each container's CPUs on the node and
// its pinned memory blocks that include the node.
nlohmann::json allocations_json(const kubelet::Allocations& allocations, const Topology& topology) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& node : topology.nodes) {
    nlohmann::json held = nlohmann::json::array();
    for (const auto& pod : allocations.pods) {
      for (const auto& container : pod.containers) {
        const CpuSet cpus = container.cpus & node.cpus;
        nlohmann::json memory = nlohmann::json::object();
        for (const auto& block : container.memory) {
          if (block.nodes.contains(node.os_index)) {
            memory[block.resource] = {{"bytes", block.bytes}, {"numa_nodes", block.nodes}};
          }
        }
        if (cpus.empty() && memory.empty()) continue;
        held.push_back({{"pod", pod.pod_namespace + "/" + pod.name},
                        {"container", container.name},
                        {"cpus", cpus},
                        {"memory", memory}});
      }
    }
    nlohmann::json assigned = nlohmann::json::object();
    if (const auto it = allocations.assigned.find(node.os_index); it != allocations.assigned.end()) {
      for (const auto& [resource, bytes] : it->second) assigned[resource] = bytes;
    }
    nodes.push_back({{"node", node.os_index},
                     {"exclusive_cpus", allocations.exclusive_cpus & node.cpus},
                     {"assigned_bytes", assigned},
                     {"held_by", held}});
  }
  return {{"source", allocations.source},
          {"stale", allocations.stale},
          {"allocatable_cpus", allocations.allocatable ? nlohmann::json(allocations.allocatable->cpus) : nlohmann::json()},
          {"pods", allocations.pods.size()},
          {"nodes", nodes}};
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
        *config.kubelet_config, kubelet::parse_kubelet_config, report);
    if (report.kubelet_config) check_kubelet_config(*report.kubelet_config, report.warnings);
  }
  discover_allocations(config, report);
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
        {"policy", c->policy}, {"default_cpu_set", c->default_cpu_set}, {"exclusive_cpus", c->exclusive_cpus()}};
  }
  if (const auto& m = report.memory_manager_state) {
    nlohmann::json assigned = nlohmann::json::object();
    for (const auto& [node, bytes] : m->assigned_memory) assigned[std::to_string(node)] = bytes;
    kubelet_json["memory_manager_state"] = {{"policy", m->policy}, {"assigned_memory_bytes", assigned}};
  }
  j = {{"topology", report.topology},
       {"allocations", report.allocations ? allocations_json(*report.allocations, report.topology) : nlohmann::json()},
       {"placement", report.placement ? nlohmann::json(*report.placement) : nlohmann::json()},
       {"kernel", kernel},
       {"kubelet", kubelet_json},
       {"warnings", report.warnings}};
}

}  // namespace numaserve::agent::discover
