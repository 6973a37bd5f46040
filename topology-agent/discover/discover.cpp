#include "discover/discover.h"

#include "numaserve/common/topology_json.h"

namespace numaserve::agent::discover {

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
  j = {{"topology", report.topology},
       {"placement", report.placement ? nlohmann::json(*report.placement) : nlohmann::json()},
       {"kernel", kernel},
       {"warnings", report.warnings}};
}

}  // namespace numaserve::agent::discover
