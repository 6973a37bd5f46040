#pragma once
// Where the reading process may run and allocate: its affinity mask, the
// kernel's Mems_allowed, and its cgroup's effective cpuset and CPU quota
// (cgroup v2 or v1). In Kubernetes this is the truth about a pod: the
// kubelet's CPU and Memory Managers express their decisions as cpuset.cpus
// and cpuset.mems, and a CPU limit as a CFS quota.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/cpu_set.h"
#include "numaserve/common/result.h"
#include "numaserve/common/topology.h"

namespace numaserve {

struct CgroupPlacement {
  int version = 2;                        // 1 (legacy/hybrid hierarchy) or 2 (unified)
  std::string path;                       // the process's cgroup, as /proc/self/cgroup names it
  std::filesystem::path cpuset_dir;       // directory the cpuset files were read from
  std::optional<CpuSet> cpus;             // effective CPUs; nullopt when no cpuset controller
  std::optional<NodeSet> mems;            // effective memory nodes
  // CPU bandwidth limit in CPUs (quota / period), the tightest along the
  // path to the root; nullopt when unlimited.
  std::optional<double> cpu_limit;
};

struct Placement {
  CpuSet affinity;      // sched_getaffinity, or Cpus_allowed_list under a fixture root
  NodeSet mems_allowed; // Mems_allowed_list
  std::optional<CgroupPlacement> cgroup;

  // What the process can actually use: affinity narrowed by the cgroup.
  CpuSet cpus() const;
  NodeSet mems() const;
};

// The memory the process's cgroup lets it still use, as the kernel's limit
// and the kubelet's eviction count it: the limit (memory.max in v2,
// memory.limit_in_bytes in v1) of the level that leaves the least room,
// from the process's cgroup up, less that level's working set (usage less
// inactive page cache, which the kernel reclaims before it OOM-kills).
struct CgroupMemory {
  int version = 2;
  std::filesystem::path dir;           // the level read (the binding one when any has a limit)
  std::optional<std::uint64_t> limit;  // nullopt: unlimited
  std::uint64_t working_set = 0;
  std::optional<std::uint64_t> room() const {
    if (!limit) return std::nullopt;
    return *limit > working_set ? *limit - working_set : 0;
  }
};
// nullopt when the process has no memory cgroup; read under `root` as
// discover_placement reads (fixture trees in tests).
Result<std::optional<CgroupMemory>> discover_cgroup_memory(const std::filesystem::path& root = "/");

// Reads the live process when root is "/", else the same files under root
// (a fixture tree, or the host's /proc mounted elsewhere).
Result<Placement> discover_placement(const std::filesystem::path& root = "/");

// This machine's host name (in a pod: the pod's), for logs and reports.
std::string host_name();

// Settings that work but hurt: a CPU quota without exclusive CPUs (threads
// sized to the cpuset get throttled), a fractional quota, a cpuset spanning
// several NUMA nodes. Each warning names the numbers on both sides.
std::vector<std::string> check_placement(const Placement& placement,
                                         const Topology* topology = nullptr);

}  // namespace numaserve
