#pragma once
// Everything the agent knows about its node, gathered in one pass: the
// machine (fatal if unreadable), and the parts that only add context — the
// agent's own placement, the kernel's NUMA-related settings — whose failures
// become warnings so discovery always completes.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kubelet/kubelet.h"
#include "podresources/podresources.h"
#include "numaserve/common/kernel_settings.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"

namespace numaserve::agent::discover {

struct DiscoverConfig {
  TopologySource source = TopologySource::live();
  // The kubelet's files, when mounted: its KubeletConfiguration, and the
  // directory holding cpu_manager_state and memory_manager_state.
  std::optional<std::filesystem::path> kubelet_config;
  std::optional<std::filesystem::path> kubelet_state_dir;
  // The kubelet's PodResources API: what pods hold is read there when its
  // socket exists, and from the state files above only when it does not.
  std::optional<podresources::ClientConfig> podresources;

  // The machine alone, without kubelet files.
  static DiscoverConfig of(TopologySource source) {
    DiscoverConfig config;
    config.source = std::move(source);
    return config;
  }
};

struct NodeReport {
  Topology topology;
  std::optional<Placement> placement;     // live source only: the agent's own
  std::optional<KernelSettings> kernel;   // live and sysfs-root sources
  std::optional<kubelet::KubeletConfig> kubelet_config;
  std::optional<kubelet::CpuManagerState> cpu_manager_state;
  std::optional<kubelet::MemoryManagerState> memory_manager_state;
  // What pods hold, from the API or the state files; CPUs and NUMA nodes the
  // machine does not have are left out, with a warning.
  std::optional<kubelet::Allocations> allocations;
  // Why the PodResources API could not be read this time (empty: it was, or
  // it was not asked); the updater then keeps its last good view.
  std::string allocations_error;
  std::uint64_t podresources_retries = 0;
  // Kubelet files that are there but could not be read or parsed this time
  // (each also a warning); the report goes on without them.
  std::vector<Error> kubelet_file_errors;
  std::vector<std::string> warnings;
};

Result<NodeReport> discover_node(const DiscoverConfig& config);

void to_json(nlohmann::json& j, const NodeReport& report);

}  // namespace numaserve::agent::discover
