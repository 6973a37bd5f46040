#pragma once
// The agent's advice for a node, as a pure function of its topology: how to
// set the kubelet (CPU, Memory and Topology Managers) and how large each
// service replica should be so that exactly one fits on one NUMA node.
// Irregular machines degrade the plan rather than fail it: a node that
// cannot hold a replica (one core left, offline siblings, no memory left
// after the reservation) gets no replica slot and a note saying why.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/cpu_set.h"
#include "numaserve/common/result.h"
#include "numaserve/common/topology.h"

namespace numaserve::agent::plan {

struct PlanConfig {
  // Whole physical cores kept for the system on every NUMA node with CPUs,
  // so that every node offers the same room to pods.
  unsigned reserved_cores_per_node = 1;
  // The kubelet's memory reservations. Its Memory Manager requires the
  // per-node reservedMemory to sum to exactly kube + system + eviction.
  std::uint64_t kube_reserved_memory = 1ull << 30;
  std::uint64_t system_reserved_memory = 1ull << 30;
  std::uint64_t eviction_hard_memory = 100ull << 20;  // the kubelet's default memory.available
  // Explicit per-node reservations (node -> bytes); empty = taken from the
  // largest nodes first, so every node is left with as equal room as possible.
  std::map<unsigned, std::uint64_t> reserved_memory;
  // Share of a node's allocatable memory a replica asks for; the rest is
  // left for the kernel's per-node allocations and page cache.
  double pod_memory_fraction = 0.9;
  unsigned replicas_per_numa_node = 1;
};

struct KubeletSettings {
  bool full_pcpus_only = false;  // set when SMT is on: never split a core between pods
  // Kubernetes' Topology Manager refuses more than 8 NUMA nodes unless told.
  std::optional<unsigned> max_allowable_numa_nodes;
  CpuSet reserved_system_cpus;
  std::uint64_t kube_reserved_memory = 0;
  std::uint64_t system_reserved_memory = 0;
  std::uint64_t eviction_hard_memory = 0;
  std::map<unsigned, std::uint64_t> reserved_memory;  // NUMA node -> bytes
};

// What one NUMA node offers to pods after the reservations.
struct NodeRoom {
  unsigned node = 0;
  CpuSet cpus;
  CpuSet reserved_cpus;
  CpuSet allocatable_cpus;
  std::uint64_t memory_bytes = 0;       // the node's memory, hugepage pools excluded
  std::uint64_t reserved_memory = 0;
  std::uint64_t allocatable_memory = 0;
  // Replica slots on this node: the plan's replicas_per_numa_node, or 0 when the
  // node cannot hold one (the plan's notes say why).
  unsigned replicas = 0;
};

// A Guaranteed request: integer CPUs, requests = limits.
struct PodSize {
  unsigned cpus = 0;
  std::uint64_t memory_bytes = 0;
  unsigned replicas_per_numa_node = 0;
  unsigned replicas_per_machine = 0;  // the sum of the nodes' slots
};

struct NodePlan {
  KubeletSettings kubelet;
  std::vector<NodeRoom> nodes;  // nodes with CPUs, by id
  PodSize pod;
  std::vector<std::string> notes;  // why the numbers are what they are

  const NodeRoom* room(unsigned node) const;
};

// Pure: the same topology and config always give the same plan. Errors only
// when no sound plan exists: bad settings, reservations that do not add up,
// or a machine on which no NUMA node can hold a replica.
Result<NodePlan> plan_node(const Topology& topology, const PlanConfig& config);

}  // namespace numaserve::agent::plan
