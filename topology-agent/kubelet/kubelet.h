#pragma once
// The kubelet as the agent finds it on a node (files mounted read-only into
// the DaemonSet): its configuration, and the state files in which its CPU and
// Memory Managers record what they have handed to Guaranteed pods.

#include <cstdint>
#include <map>
#include <optional>
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
  CpuSet exclusive_cpus;   // held by Guaranteed containers
};
Result<CpuManagerState> parse_cpu_manager_state(std::string_view json, const std::string& file);

// /var/lib/kubelet/memory_manager_state: memory the Static policy has
// assigned on each NUMA node (bytes, ordinary memory only).
struct MemoryManagerState {
  std::string policy;
  std::map<unsigned, std::uint64_t> assigned_memory;
};
Result<MemoryManagerState> parse_memory_manager_state(std::string_view json, const std::string& file);

}  // namespace numaserve::agent::kubelet
