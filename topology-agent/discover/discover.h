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

#include "numaserve/common/kernel_settings.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"

namespace numaserve::agent::discover {

struct DiscoverConfig {
  TopologySource source = TopologySource::live();
};

struct NodeReport {
  Topology topology;
  std::optional<Placement> placement;     // live source only: the agent's own
  std::optional<KernelSettings> kernel;   // live and sysfs-root sources
  std::vector<std::string> warnings;
};

Result<NodeReport> discover_node(const DiscoverConfig& config);

void to_json(nlohmann::json& j, const NodeReport& report);

}  // namespace numaserve::agent::discover
