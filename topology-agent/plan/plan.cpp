#include "plan/plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "numaserve/common/quantity.h"

namespace numaserve::agent::plan {
namespace {

constexpr std::uint64_t kMi = 1ull << 20;
// The Topology Manager's built-in limit on NUMA nodes (Kubernetes 1.31+).
constexpr unsigned kTopologyManagerMaxNodes = 8;

// A node's memory for ordinary pages: hugepage pools are a separate resource.
std::uint64_t usable_memory(const NumaNode& node) {
  std::uint64_t hugepages = 0;
  for (const auto& [size, count] : node.hugepages) hugepages += size * count;
  return node.memory_bytes - std::min(node.memory_bytes, hugepages);
}

// Places `total` bytes of reservation so that the nodes are left as equal
// as possible: the largest nodes give first (water-filling), so the smallest
// node, which sizes every replica, keeps the most. Works in whole MiB for
// readable quantities; a sub-MiB remainder goes to the largest node. The sum
// is exact: the kubelet checks it to the byte.
std::map<unsigned, std::uint64_t> level_memory(std::uint64_t total,
                                               const std::map<unsigned, std::uint64_t>& memory) {
  const std::uint64_t want = total / kMi;
  auto given_above = [&](std::uint64_t level) {
    std::uint64_t sum = 0;
    for (const auto& [node, bytes] : memory) sum += bytes / kMi > level ? bytes / kMi - level : 0;
    return sum;
  };
  // The highest level at which the nodes above it still give enough.
  std::uint64_t lo = 0, hi = 0;
  for (const auto& [node, bytes] : memory) hi = std::max(hi, bytes / kMi);
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo + 1) / 2;
    if (given_above(mid) >= want) lo = mid; else hi = mid - 1;
  }
  std::map<unsigned, std::uint64_t> out;
  std::uint64_t excess = given_above(lo) > want ? given_above(lo) - want : 0;
  unsigned largest = memory.begin()->first;
  for (const auto& [node, bytes] : memory) {
    std::uint64_t mib = bytes / kMi > lo ? bytes / kMi - lo : 0;
    const std::uint64_t back = std::min(excess, mib > 0 ? std::uint64_t{1} : std::uint64_t{0});
    mib -= back;
    excess -= back;
    out[node] = mib * kMi;
    if (bytes > memory.at(largest)) largest = node;
  }
  out[largest] += total - want * kMi;
  return out;
}

std::string list_of(const std::vector<unsigned>& ids) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
  return out.str();
}

}  // namespace

Result<Plan> plan_node(const Topology& topology, const PlanConfig& config) {
  Plan plan;
  std::vector<const NumaNode*> cpu_nodes;
  for (const auto& node : topology.nodes) {
    if (!node.memory_only()) cpu_nodes.push_back(&node);
  }
  if (cpu_nodes.empty()) {
    return make_error(Error::Code::kInvalidArgument, "no NUMA node has CPUs; nothing to plan");
  }
  if (config.replicas_per_node == 0) {
    return make_error(Error::Code::kInvalidArgument, "replicas per node must be at least 1",
                      "replicas_per_node");
  }
  if (config.reserved_cores_per_node == 0) {
    return make_error(Error::Code::kInvalidArgument,
                      "reserve at least one core per node: the kubelet's static CPU manager refuses "
                      "to start without reserved CPUs",
                      "reserved_cores_per_node");
  }
  if (!(config.pod_memory_fraction > 0 && config.pod_memory_fraction <= 1)) {
    return make_error(Error::Code::kInvalidArgument, "pod memory fraction must be in (0, 1]",
                      "pod_memory_fraction");
  }

  auto& kubelet = plan.kubelet;
  const unsigned smt = topology.threads_per_core();
  kubelet.full_pcpus_only = smt > 1;
  if (topology.nodes.size() > kTopologyManagerMaxNodes) {
    kubelet.max_allowable_numa_nodes = static_cast<unsigned>(topology.nodes.size());
    plan.notes.push_back(std::to_string(topology.nodes.size()) +
                         " NUMA nodes: the Topology Manager needs max-allowable-numa-nodes above its "
                         "limit of 8 (Kubernetes 1.31+)");
  }
  kubelet.kube_reserved_memory = config.kube_reserved_memory;
  kubelet.system_reserved_memory = config.system_reserved_memory;
  kubelet.eviction_hard_memory = config.eviction_hard_memory;

  // Memory reservations: the kubelet refuses to start unless they add up.
  const std::uint64_t reserved_total =
      config.kube_reserved_memory + config.system_reserved_memory + config.eviction_hard_memory;
  if (config.reserved_memory.empty()) {
    std::map<unsigned, std::uint64_t> memory;
    std::uint64_t machine_memory = 0;
    for (const auto* node : cpu_nodes) {
      memory[node->os_index] = usable_memory(*node);
      machine_memory += memory[node->os_index];
    }
    if (machine_memory <= reserved_total) {
      return make_error(Error::Code::kInvalidArgument,
                        "the nodes with CPUs have " + format_quantity(machine_memory) +
                            " of memory; the reservations alone take " + format_quantity(reserved_total),
                        "reserved_memory");
    }
    kubelet.reserved_memory = level_memory(reserved_total, memory);
  } else {
    kubelet.reserved_memory = config.reserved_memory;
    for (const auto& [node, bytes] : kubelet.reserved_memory) {
      if (topology.node(node) == nullptr) {
        return make_error(Error::Code::kInvalidArgument,
                          "reservedMemory names NUMA node " + std::to_string(node) +
                              ", which this machine does not have (nodes " +
                              topology.node_ids().to_list() + ")",
                          "reserved_memory");
      }
    }
  }
  const std::uint64_t reserved_sum = std::accumulate(
      kubelet.reserved_memory.begin(), kubelet.reserved_memory.end(), std::uint64_t{0},
      [](std::uint64_t sum, const auto& entry) { return sum + entry.second; });
  if (reserved_sum != reserved_total) {
    return make_error(Error::Code::kInvalidArgument,
                      "reservedMemory sums to " + format_quantity(reserved_sum) +
                          " but kube-reserved + system-reserved + eviction-hard memory is " +
                          format_quantity(reserved_total) +
                          "; the kubelet's Memory Manager would refuse to start",
                      "reserved_memory");
  }

  // CPUs: the first whole cores of every node go to the system.
  unsigned min_full_cores = ~0u;
  std::uint64_t min_memory = ~std::uint64_t{0};
  for (const auto* node : cpu_nodes) {
    NodeRoom room;
    room.node = node->os_index;
    room.cpus = node->cpus;
    if (node->cores.size() <= config.reserved_cores_per_node) {
      return make_error(Error::Code::kInvalidArgument,
                        "NUMA node " + std::to_string(node->os_index) + " has " +
                            std::to_string(node->cores.size()) + " core(s); reserving " +
                            std::to_string(config.reserved_cores_per_node) +
                            " leaves none for a replica",
                        "reserved_cores_per_node");
    }
    unsigned full_cores = 0;
    for (std::size_t i = 0; i < node->cores.size(); ++i) {
      const CpuSet& core = node->cores[i];
      if (i < config.reserved_cores_per_node) {
        room.reserved_cpus |= core;
      } else {
        room.allocatable_cpus |= core;
        // Under full-pcpus-only a core with an offline sibling cannot be
        // given whole; it still serves the system and burstable pods.
        full_cores += core.count() == smt ? 1 : 0;
      }
    }
    kubelet.reserved_system_cpus |= room.reserved_cpus;
    room.memory_bytes = usable_memory(*node);
    room.reserved_memory = kubelet.reserved_memory.count(room.node) ? kubelet.reserved_memory.at(room.node) : 0;
    if (room.reserved_memory >= room.memory_bytes) {
      return make_error(Error::Code::kInvalidArgument,
                        "NUMA node " + std::to_string(room.node) + " has " +
                            format_quantity(room.memory_bytes) + " of memory but " +
                            format_quantity(room.reserved_memory) + " is reserved on it",
                        "reserved_memory");
    }
    room.allocatable_memory = room.memory_bytes - room.reserved_memory;
    min_full_cores = std::min(min_full_cores, full_cores);
    min_memory = std::min(min_memory, room.allocatable_memory);
    plan.nodes.push_back(std::move(room));
  }

  // The replica: the largest Guaranteed request that fits on every node.
  auto& pod = plan.pod;
  pod.replicas_per_node = config.replicas_per_node;
  pod.replicas_per_machine = static_cast<unsigned>(cpu_nodes.size()) * config.replicas_per_node;
  pod.cpus = min_full_cores / config.replicas_per_node * smt;
  const double memory_share =
      static_cast<double>(min_memory) * config.pod_memory_fraction / config.replicas_per_node;
  pod.memory_bytes = static_cast<std::uint64_t>(memory_share) / kMi * kMi;
  if (pod.cpus == 0) {
    return make_error(Error::Code::kInvalidArgument,
                      std::to_string(config.replicas_per_node) + " replicas per node need at least " +
                          std::to_string(config.replicas_per_node) + " whole cores each node, the smallest has " +
                          std::to_string(min_full_cores),
                      "replicas_per_node");
  }

  // Notes: what shaped the numbers.
  if (smt > 1) {
    plan.notes.push_back("SMT with " + std::to_string(smt) +
                         " threads per core: full-pcpus-only keeps each replica on whole cores, so "
                         "its CPU count is a multiple of " + std::to_string(smt));
  }
  const auto [min_cpu_room, max_cpu_room] = std::minmax_element(
      plan.nodes.begin(), plan.nodes.end(),
      [](const NodeRoom& a, const NodeRoom& b) { return a.allocatable_cpus.count() < b.allocatable_cpus.count(); });
  if (min_cpu_room->allocatable_cpus.count() != max_cpu_room->allocatable_cpus.count()) {
    plan.notes.push_back("unequal nodes: node " + std::to_string(min_cpu_room->node) + " offers " +
                         std::to_string(min_cpu_room->allocatable_cpus.count()) + " CPUs, node " +
                         std::to_string(max_cpu_room->node) + " " +
                         std::to_string(max_cpu_room->allocatable_cpus.count()) +
                         "; replicas are sized to the smallest so one size fits every node");
  }
  const auto [min_mem_room, max_mem_room] = std::minmax_element(
      plan.nodes.begin(), plan.nodes.end(),
      [](const NodeRoom& a, const NodeRoom& b) { return a.allocatable_memory < b.allocatable_memory; });
  if (max_mem_room->allocatable_memory - min_mem_room->allocatable_memory >= 256 * kMi) {
    plan.notes.push_back("unequal memory: node " + std::to_string(min_mem_room->node) + " offers " +
                         format_quantity(min_mem_room->allocatable_memory / kMi * kMi) + ", node " +
                         std::to_string(max_mem_room->node) + " " +
                         format_quantity(max_mem_room->allocatable_memory / kMi * kMi) +
                         "; replicas are sized to the smallest");
  }
  std::vector<unsigned> memory_only;
  for (const auto& node : topology.nodes) {
    if (node.memory_only()) memory_only.push_back(node.os_index);
  }
  if (!memory_only.empty()) {
    plan.notes.push_back("memory-only NUMA node(s) " + list_of(memory_only) +
                         " get no replica; the kubelet cannot align CPUs with them");
  }
  if (!topology.offline_cpus.empty()) {
    plan.notes.push_back("offline CPUs " + topology.offline_cpus.to_list() + " are left out");
  }
  if (!topology.cpus_without_node.empty()) {
    plan.notes.push_back("CPUs " + topology.cpus_without_node.to_list() +
                         " belong to no online NUMA node and are left out");
  }
  return plan;
}

}  // namespace numaserve::agent::plan
