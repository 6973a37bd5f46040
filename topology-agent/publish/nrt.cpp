#include "publish/nrt.h"

#include <algorithm>

#include "numaserve/common/quantity.h"

namespace numaserve::agent::publish {
namespace {

std::string zone_name(unsigned node) { return "node-" + std::to_string(node); }

// Kubernetes names hugepage resources by size: hugepages-2Mi, hugepages-1Gi.
std::string hugepage_resource(std::uint64_t size) { return "hugepages-" + format_quantity(size); }

nlohmann::json resource(const std::string& name, std::uint64_t capacity, std::uint64_t allocatable,
                        std::uint64_t available) {
  return {{"name", name}, {"capacity", capacity}, {"allocatable", allocatable}, {"available", available}};
}

}  // namespace

nlohmann::json make_node_resource_topology(const std::string& node_name,
                                           const discover::NodeReport& report,
                                           const plan::Plan& plan) {
  const Topology& t = report.topology;
  nlohmann::json zones = nlohmann::json::array();
  for (const auto& node : t.nodes) {
    nlohmann::json zone = {{"name", zone_name(node.os_index)}, {"type", "Node"}};
    if (t.distances) {
      nlohmann::json costs = nlohmann::json::array();
      for (unsigned other : t.distances->nodes) {
        costs.push_back({{"name", zone_name(other)}, {"value", t.distances->at(node.os_index, other).value_or(0)}});
      }
      zone["costs"] = costs;
    }
    nlohmann::json resources = nlohmann::json::array();
    const auto room = std::find_if(plan.nodes.begin(), plan.nodes.end(),
                                   [&](const plan::NodeRoom& r) { return r.node == node.os_index; });
    if (room != plan.nodes.end()) {
      // What the kubelet has already handed out lowers what is available.
      const CpuSet taken = report.cpu_manager_state ? report.cpu_manager_state->exclusive_cpus : CpuSet{};
      const auto allocatable = room->allocatable_cpus.count();
      resources.push_back(resource("cpu", room->cpus.count(), allocatable,
                                   allocatable - (room->allocatable_cpus & taken).count()));
      std::uint64_t assigned = 0;
      if (report.memory_manager_state && report.memory_manager_state->assigned_memory.contains(node.os_index)) {
        assigned = report.memory_manager_state->assigned_memory.at(node.os_index);
      }
      resources.push_back(resource("memory", room->memory_bytes, room->allocatable_memory,
                                   room->allocatable_memory - std::min(assigned, room->allocatable_memory)));
    } else {
      // A memory-only node: its memory is real capacity, but no pod can be
      // aligned with it, so none is allocatable.
      resources.push_back(resource("memory", node.memory_bytes, 0, 0));
    }
    for (const auto& [size, count] : node.hugepages) {
      resources.push_back(resource(hugepage_resource(size), size * count, size * count, size * count));
    }
    zone["resources"] = resources;
    zones.push_back(std::move(zone));
  }
  nlohmann::json nrt = {{"apiVersion", "topology.node.k8s.io/v1alpha2"},
                        {"kind", "NodeResourceTopology"},
                        {"metadata", {{"name", node_name}}},
                        {"zones", zones}};
  // The scheduler plugin filters by the kubelet's actual Topology Manager
  // settings, so they are published only when read from its configuration.
  if (const auto& k = report.kubelet_config) {
    nrt["attributes"] = nlohmann::json::array(
        {{{"name", "topologyManagerPolicy"}, {"value", k->topology_manager_policy}},
         {{"name", "topologyManagerScope"}, {"value", k->topology_manager_scope}}});
  }
  return nrt;
}

std::map<std::string, std::string> make_node_labels(const discover::NodeReport& report,
                                                    const plan::Plan& plan) {
  const Topology& t = report.topology;
  std::size_t min_cpus = 0;
  for (const auto& room : plan.nodes) {
    min_cpus = min_cpus == 0 ? room.cpus.count() : std::min(min_cpus, room.cpus.count());
  }
  return {{"numaserve.io/numa-nodes", std::to_string(t.nodes_with_cpus().count())},
          {"numaserve.io/memory-only-numa-nodes", std::to_string(t.nodes.size() - t.nodes_with_cpus().count())},
          {"numaserve.io/cpus-per-numa-node", std::to_string(min_cpus)},
          {"numaserve.io/smt", t.threads_per_core() > 1 ? "true" : "false"},
          {"numaserve.io/replica-cpus", std::to_string(plan.pod.cpus)},
          {"numaserve.io/replica-memory", format_quantity(plan.pod.memory_bytes)},
          {"numaserve.io/replicas", std::to_string(plan.pod.replicas_per_machine)}};
}

}  // namespace numaserve::agent::publish
