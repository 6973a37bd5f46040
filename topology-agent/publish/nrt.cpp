#include "publish/nrt.h"

#include <algorithm>

#include "fleet/fleet.h"
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

// The kubelet's allocatable bytes of `resource` on `node`, when its API said.
std::optional<std::uint64_t> api_allocatable(const std::optional<kubelet::Allocations>& allocations,
                                             const std::string& resource, unsigned node) {
  if (!allocations || !allocations->allocatable) return std::nullopt;
  std::optional<std::uint64_t> bytes;
  for (const auto& block : allocations->allocatable->memory) {
    if (block.resource == resource && block.nodes.contains(node)) {
      bytes = saturating_add(bytes.value_or(0), block.bytes);
    }
  }
  return bytes.value_or(0);
}

std::uint64_t assigned(const std::optional<kubelet::Allocations>& allocations, unsigned node,
                       const std::string& resource) {
  if (!allocations) return 0;
  const auto on_node = allocations->assigned.find(node);
  if (on_node == allocations->assigned.end()) return 0;
  const auto bytes = on_node->second.find(resource);
  return bytes == on_node->second.end() ? 0 : bytes->second;
}

nlohmann::json zone_resources(const NumaNode& node, const discover::NodeReport& report, const plan::NodePlan* plan) {
  const auto& allocations = report.allocations;
  const plan::NodeRoom* room = plan ? plan->room(node.os_index) : nullptr;
  nlohmann::json resources = nlohmann::json::array();
  if (!node.memory_only()) {
    CpuSet allocatable = node.cpus;
    if (allocations && allocations->allocatable) {
      allocatable = allocations->allocatable->cpus & node.cpus;
    } else if (room) {
      allocatable = room->allocatable_cpus;
    } else if (report.kubelet_config) {
      allocatable = node.cpus - report.kubelet_config->reserved_system_cpus;
    }
    const CpuSet taken = allocations ? allocations->exclusive_cpus : CpuSet{};
    resources.push_back(resource("cpu", node.cpus.count(), allocatable.count(), (allocatable - taken).count()));
  }
  // A memory-only node's memory is real capacity, but no pod can be aligned
  // with it, so none is allocatable unless the kubelet says otherwise.
  const std::uint64_t memory = node.ordinary_memory();
  std::optional<std::uint64_t> kubelet_memory = api_allocatable(allocations, "memory", node.os_index);
  if (!kubelet_memory && allocations) {
    if (const auto it = allocations->allocatable_memory.find(node.os_index); it != allocations->allocatable_memory.end()) {
      kubelet_memory = it->second;
    }
  }
  const std::uint64_t memory_allocatable =
      kubelet_memory.value_or(room ? room->allocatable_memory : node.memory_only() ? 0 : memory);
  resources.push_back(resource("memory", memory, memory_allocatable,
                               memory_allocatable -
                                   std::min(memory_allocatable, assigned(allocations, node.os_index, "memory"))));
  for (const auto& [size, count] : node.hugepages) {
    const std::string name = hugepage_resource(size);
    const std::uint64_t allocatable = api_allocatable(allocations, name, node.os_index).value_or(size * count);
    resources.push_back(resource(name, size * count, allocatable,
                                 allocatable - std::min(allocatable, assigned(allocations, node.os_index, name))));
  }
  return resources;
}

}  // namespace

nlohmann::json make_node_resource_topology(const std::string& node_name, const discover::NodeReport& report,
                                           const plan::NodePlan* plan, FingerprintMethod method) {
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
    zone["resources"] = zone_resources(node, report, plan);
    zones.push_back(std::move(zone));
  }
  nlohmann::json nrt = {{"apiVersion", "topology.node.k8s.io/v1alpha2"},
                        {"kind", "NodeResourceTopology"},
                        {"metadata", {{"name", node_name}}},
                        {"zones", zones}};
  nlohmann::json attributes = nlohmann::json::array();
  // The scheduler plugin filters by the kubelet's actual Topology Manager
  // settings, so they are published only when read from its configuration.
  if (const auto& k = report.kubelet_config) {
    attributes.push_back({{"name", "topologyManagerPolicy"}, {"value", k->topology_manager_policy}});
    attributes.push_back({{"name", "topologyManagerScope"}, {"value", k->topology_manager_scope}});
  }
  // Only a pod list the kubelet gave by name can be fingerprinted; the
  // checkpoint files know pods by UID.
  if (report.allocations && report.allocations->allocatable) {
    attributes.push_back({{"name", "nodeTopologyPodsFingerprint"},
                          {"value", pod_fingerprint(pods_counted(report.allocations->pods, method))}});
    attributes.push_back({{"name", "nodeTopologyPodsFingerprintMethod"}, {"value", std::string(to_string(method))}});
  }
  if (!attributes.empty()) nrt["attributes"] = attributes;
  return nrt;
}

std::map<std::string, std::string> make_node_labels(const discover::NodeReport& report, const plan::NodePlan* plan) {
  const Topology& t = report.topology;
  std::size_t min_cpus = 0;
  for (const auto& node : t.nodes) {
    if (!node.memory_only()) min_cpus = min_cpus == 0 ? node.cpus.count() : std::min(min_cpus, node.cpus.count());
  }
  std::map<std::string, std::string> labels = {
      {kube::fleet::label::kNumaNodes, std::to_string(t.nodes_with_cpus().count())},
      {kube::fleet::label::kMemoryOnlyNumaNodes, std::to_string(t.nodes.size() - t.nodes_with_cpus().count())},
      {kube::fleet::label::kCpusPerNumaNode, std::to_string(min_cpus)},
      {kube::fleet::label::kSmt, t.threads_per_core() > 1 ? "true" : "false"},
      {kube::fleet::label::kThreadsPerCore, std::to_string(t.threads_per_core())}};
  // The class cluster-plan will find for this node, from the same object
  // the agent publishes: agent and plan cannot disagree.
  if (auto shape = kube::fleet::shape_of(make_node_resource_topology("", report, plan), t.threads_per_core())) {
    labels[kube::fleet::label::kMachineClass] = kube::fleet::machine_class(*shape);
  }
  if (plan) {
    labels[kube::fleet::label::kReplicaCpus] = std::to_string(plan->pod.cpus);
    labels[kube::fleet::label::kReplicaMemory] = format_quantity(plan->pod.memory_bytes);
    labels[kube::fleet::label::kReplicas] = std::to_string(plan->pod.replicas_per_machine);
  }
  return labels;
}

}  // namespace numaserve::agent::publish
