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

Status validate(const PlanConfig& config) {
  if (config.replicas_per_numa_node == 0) {
    return make_error(Error::Code::kInvalidArgument, "replicas per node must be at least 1",
                      "replicas_per_numa_node");
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
  return {};
}

// The kubelet's reservedMemory, per node: explicit, or levelled over the
// nodes with CPUs. Either way it must add up, or the kubelet refuses to start.
Result<std::map<unsigned, std::uint64_t>> reserve_memory(const Topology& topology,
                                                         const std::vector<const NumaNode*>& cpu_nodes,
                                                         const PlanConfig& config) {
  const std::uint64_t total =
      config.kube_reserved_memory + config.system_reserved_memory + config.eviction_hard_memory;
  std::map<unsigned, std::uint64_t> reserved = config.reserved_memory;
  if (reserved.empty()) {
    std::map<unsigned, std::uint64_t> memory;
    std::uint64_t machine_memory = 0;
    for (const auto* node : cpu_nodes) {
      memory[node->os_index] = node->ordinary_memory();
      machine_memory += memory[node->os_index];
    }
    if (machine_memory <= total) {
      return make_error(Error::Code::kInvalidArgument,
                        "the nodes with CPUs have " + format_quantity(machine_memory) +
                            " of memory; the reservations alone take " + format_quantity(total),
                        "reserved_memory");
    }
    return level_memory(total, memory);
  }
  for (const auto& [node, bytes] : reserved) {
    if (topology.node(node) == nullptr) {
      return make_error(Error::Code::kInvalidArgument,
                        "reservedMemory names NUMA node " + std::to_string(node) +
                            ", which this machine does not have (nodes " + topology.node_ids().to_list() + ")",
                        "reserved_memory");
    }
  }
  const std::uint64_t sum = std::accumulate(reserved.begin(), reserved.end(), std::uint64_t{0},
                                            [](std::uint64_t s, const auto& entry) { return s + entry.second; });
  if (sum != total) {
    return make_error(Error::Code::kInvalidArgument,
                      "reservedMemory sums to " + format_quantity(sum) +
                          " but kube-reserved + system-reserved + eviction-hard memory is " +
                          format_quantity(total) + "; the kubelet's Memory Manager would refuse to start",
                      "reserved_memory");
  }
  return reserved;
}

// One node cut into the system's share and the pods' share, and whether a
// replica fits in the pods' share.
struct Carved {
  NodeRoom room;
  unsigned full_cores = 0;  // allocatable cores with every sibling online
  std::string no_replica;   // why the node holds no replica; empty when it does
  std::string setting;      // the setting that rules it out
};

// The first whole cores go to the system; a node with no more cores than
// that gives them all (the reservation stays whole cores) and holds no replica.
Carved carve_node(const NumaNode& node, const PlanConfig& config,
                  const std::map<unsigned, std::uint64_t>& reserved_memory, unsigned smt) {
  Carved carved;
  NodeRoom& room = carved.room;
  room.node = node.os_index;
  room.cpus = node.cpus;
  for (std::size_t i = 0; i < node.cores.size(); ++i) {
    const CpuSet& core = node.cores[i];
    if (i < config.reserved_cores_per_node) {
      room.reserved_cpus |= core;
    } else {
      room.allocatable_cpus |= core;
      // Under full-pcpus-only a core with an offline sibling cannot be
      // given whole; it still serves the system and burstable pods.
      carved.full_cores += core.count() == smt ? 1 : 0;
    }
  }
  room.memory_bytes = node.ordinary_memory();
  room.reserved_memory = reserved_memory.contains(room.node) ? reserved_memory.at(room.node) : 0;
  room.allocatable_memory = room.memory_bytes - std::min(room.memory_bytes, room.reserved_memory);

  const unsigned k = config.replicas_per_numa_node;
  const double memory_share = static_cast<double>(room.allocatable_memory) * config.pod_memory_fraction / k;
  if (node.cores.size() <= config.reserved_cores_per_node) {
    carved.no_replica = "it has " + std::to_string(node.cores.size()) + " core(s) and reserving " +
                        std::to_string(config.reserved_cores_per_node) + " per node leaves none";
    carved.setting = "reserved_cores_per_node";
  } else if (carved.full_cores < k) {
    carved.no_replica = "it has " + std::to_string(carved.full_cores) + " whole core(s) after the reservation; " +
                        std::to_string(k) + " replica(s) need " + std::to_string(k);
    carved.setting = "replicas_per_numa_node";
  } else if (memory_share < static_cast<double>(kMi)) {
    carved.no_replica = "its " + format_quantity(room.memory_bytes) + " of memory less the " +
                        format_quantity(room.reserved_memory) + " reserved on it leaves no memory for " +
                        std::to_string(k) + " replica(s)";
    carved.setting = "reserved_memory";
  }
  return carved;
}

// The replica: the largest Guaranteed request that fits on every node that
// holds one. Only a machine where no node does is an error, charged to the
// setting that ruled out the first node.
Status size_replica(NodePlan& plan, const std::vector<Carved>& carved, const PlanConfig& config, unsigned smt) {
  const unsigned k = config.replicas_per_numa_node;
  unsigned min_full_cores = ~0u;
  std::uint64_t min_memory = ~std::uint64_t{0};
  std::string reasons;
  for (const auto& c : carved) {
    if (!c.no_replica.empty()) {
      reasons += (reasons.empty() ? "" : "; ") + std::string("node ") + std::to_string(c.room.node) + ": " + c.no_replica;
      continue;
    }
    min_full_cores = std::min(min_full_cores, c.full_cores);
    min_memory = std::min(min_memory, c.room.allocatable_memory);
  }
  if (min_full_cores == ~0u) {
    return make_error(Error::Code::kInvalidArgument, "no NUMA node can hold a replica (" + reasons + ")",
                      carved.front().setting);
  }
  auto& pod = plan.pod;
  pod.replicas_per_numa_node = k;
  pod.cpus = min_full_cores / k * smt;
  pod.memory_bytes =
      static_cast<std::uint64_t>(static_cast<double>(min_memory) * config.pod_memory_fraction / k) / kMi * kMi;
  for (auto& room : plan.nodes) pod.replicas_per_machine += room.replicas;
  return {};
}

// Notes: what shaped the numbers, compared over the nodes that hold replicas.
void explain(NodePlan& plan, const Topology& topology, const std::vector<Carved>& carved, unsigned smt) {
  for (const auto& c : carved) {
    if (!c.no_replica.empty()) {
      plan.notes.push_back("NUMA node " + std::to_string(c.room.node) + " gets no replica: " + c.no_replica);
    }
  }
  if (smt > 1) {
    plan.notes.push_back("SMT with " + std::to_string(smt) +
                         " threads per core: full-pcpus-only keeps each replica on whole cores, so "
                         "its CPU count is a multiple of " + std::to_string(smt));
  }
  std::vector<const NodeRoom*> hosts;
  for (const auto& room : plan.nodes) {
    if (room.replicas > 0) hosts.push_back(&room);
  }
  const auto [min_cpu_room, max_cpu_room] = std::minmax_element(
      hosts.begin(), hosts.end(),
      [](const NodeRoom* a, const NodeRoom* b) { return a->allocatable_cpus.count() < b->allocatable_cpus.count(); });
  if ((*min_cpu_room)->allocatable_cpus.count() != (*max_cpu_room)->allocatable_cpus.count()) {
    plan.notes.push_back("unequal nodes: node " + std::to_string((*min_cpu_room)->node) + " offers " +
                         std::to_string((*min_cpu_room)->allocatable_cpus.count()) + " CPUs, node " +
                         std::to_string((*max_cpu_room)->node) + " " +
                         std::to_string((*max_cpu_room)->allocatable_cpus.count()) +
                         "; replicas are sized to the smallest so one size fits every node");
  }
  const auto [min_mem_room, max_mem_room] = std::minmax_element(
      hosts.begin(), hosts.end(),
      [](const NodeRoom* a, const NodeRoom* b) { return a->allocatable_memory < b->allocatable_memory; });
  if ((*max_mem_room)->allocatable_memory - (*min_mem_room)->allocatable_memory >= 256 * kMi) {
    plan.notes.push_back("unequal memory: node " + std::to_string((*min_mem_room)->node) + " offers " +
                         format_quantity((*min_mem_room)->allocatable_memory / kMi * kMi) + ", node " +
                         std::to_string((*max_mem_room)->node) + " " +
                         format_quantity((*max_mem_room)->allocatable_memory / kMi * kMi) +
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
}

}  // namespace

const NodeRoom* NodePlan::room(unsigned node) const {
  const auto it = std::find_if(nodes.begin(), nodes.end(), [&](const NodeRoom& r) { return r.node == node; });
  return it == nodes.end() ? nullptr : &*it;
}

Result<NodePlan> plan_node(const Topology& topology, const PlanConfig& config) {
  std::vector<const NumaNode*> cpu_nodes;
  for (const auto& node : topology.nodes) {
    if (!node.memory_only()) cpu_nodes.push_back(&node);
  }
  if (cpu_nodes.empty()) {
    return make_error(Error::Code::kInvalidArgument, "no NUMA node has CPUs; nothing to plan");
  }
  if (auto valid = validate(config); !valid) return tl::unexpected(valid.error());

  NodePlan plan;
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
  auto reserved = reserve_memory(topology, cpu_nodes, config);
  if (!reserved) return tl::unexpected(reserved.error());
  kubelet.reserved_memory = std::move(*reserved);

  std::vector<Carved> carved;
  for (const auto* node : cpu_nodes) {
    carved.push_back(carve_node(*node, config, kubelet.reserved_memory, smt));
    Carved& c = carved.back();
    c.room.replicas = c.no_replica.empty() ? config.replicas_per_numa_node : 0;
    kubelet.reserved_system_cpus |= c.room.reserved_cpus;
    plan.nodes.push_back(c.room);
  }
  if (auto sized = size_replica(plan, carved, config, smt); !sized) return tl::unexpected(sized.error());
  explain(plan, topology, carved, smt);
  return plan;
}

}  // namespace numaserve::agent::plan
