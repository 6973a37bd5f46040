#pragma once
// The kubelet as the agent finds it on a node: its configuration (a file
// mounted read-only), and what it has handed to pods, learnt from its
// PodResources API or, where that socket is absent, from the state files in
// which its CPU and Memory Managers record their assignments.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "numaserve/common/cpu_set.h"
#include "numaserve/common/result.h"

namespace numaserve::agent::kubelet {

// The NUMA-relevant part of a KubeletConfiguration (kubelet.config.k8s.io/v1beta1).
struct KubeletConfig {
  std::string cpu_manager_policy;       // "none" when unset, as the kubelet defaults
  std::map<std::string, std::string> cpu_manager_policy_options;
  std::string topology_manager_policy;  // "none" when unset
  std::string topology_manager_scope;   // "container" when unset
  std::map<std::string, std::string> topology_manager_policy_options;
  std::string memory_manager_policy;    // "None" when unset
  CpuSet reserved_system_cpus;
  // Fields this KubeletConfiguration version does not have, "name (line N)":
  // the kubelet rejects or ignores them, either way a typo to fix.
  std::vector<std::string> unknown_fields;
};

// `file` names the source in errors: "kubelet.yaml line 3: ...".
Result<KubeletConfig> parse_kubelet_config(std::string_view yaml, const std::string& file);

// /var/lib/kubelet/cpu_manager_state: the static policy's assignments.
struct CpuManagerState {
  std::string policy;
  CpuSet default_cpu_set;  // shared pool
  std::map<std::string, CpuSet> pods;  // pod UID -> its containers' exclusive CPUs
  CpuSet exclusive_cpus() const;       // held by Guaranteed containers: every pod's
};
Result<CpuManagerState> parse_cpu_manager_state(std::string_view json, const std::string& file);

// /var/lib/kubelet/memory_manager_state: memory the Static policy has
// assigned on each NUMA node (bytes, ordinary memory only).
struct MemoryManagerState {
  std::string policy;
  std::map<unsigned, std::uint64_t> assigned_memory;     // machineState: reserved
  std::map<unsigned, std::uint64_t> allocatable_memory;  // machineState: allocatable, where written
  // entries: pod UID -> NUMA node -> bytes of its containers' memory blocks.
  // The Static policy forgets an ended pod's entries only when it next admits
  // one (v1.34): until then they stay counted in `assigned_memory`.
  std::map<std::string, std::map<unsigned, std::uint64_t>> pods;
};
Result<MemoryManagerState> parse_memory_manager_state(std::string_view json, const std::string& file);

// --- What pods hold, whichever way it was learnt -----------------------------

struct MemoryBlock {
  std::string resource;  // "memory" or "hugepages-<size>", as the kubelet names it
  std::uint64_t bytes = 0;
  NodeSet nodes;         // the NUMA nodes it comes from
};

struct ContainerAllocation {
  std::string name;
  CpuSet cpus;  // exclusive CPUs; the API lists none for the shared pool
  std::vector<MemoryBlock> memory;
  std::size_t devices = 0;  // device ids handed out
};

struct PodAllocation {
  std::string pod_namespace;
  std::string name;
  std::vector<ContainerAllocation> containers;
  // Holds exclusive CPUs, pinned memory or devices: what the CPU and Memory
  // Managers (and device plugins) give only to Guaranteed pods.
  bool exclusive() const;
};

// What the kubelet offers pods at all (its GetAllocatableResources).
struct Allocatable {
  CpuSet cpus;
  std::vector<MemoryBlock> memory;  // one block per NUMA node and resource
};

struct Allocations {
  std::string source;                      // the socket queried, or the state directory read
  std::optional<Allocatable> allocatable;  // only the API says
  std::vector<PodAllocation> pods;         // only the API names pods (the files know UIDs)
  CpuSet exclusive_cpus;                   // every container's exclusive CPUs
  // NUMA node -> resource -> bytes pinned there. The API does not say how a
  // block spread over several nodes divides, so it is charged evenly.
  std::map<unsigned, std::map<std::string, std::uint64_t>> assigned;
  // The Memory Manager's allocatable ordinary memory per NUMA node, from its
  // state file: what the kubelet offers where no API said (`allocatable`).
  std::map<unsigned, std::uint64_t> allocatable_memory;
  bool stale = false;  // the last good view, kept because the latest query failed
};

Allocations allocations_of_pods(std::string source, std::optional<Allocatable> allocatable,
                                std::vector<PodAllocation> pods);
// The fallback: totals from cpu_manager_state and memory_manager_state,
// less what their entries give pods in `ended` (UIDs of pods the kubelet no
// longer runs: their entries outlive them, see MemoryManagerState).
Allocations allocations_of_state_files(std::string source, const std::optional<CpuManagerState>& cpus,
                                       const std::optional<MemoryManagerState>& memory,
                                       const std::set<std::string>& ended = {});

}  // namespace numaserve::agent::kubelet
