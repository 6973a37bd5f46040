#pragma once
// How the service uses the CPUs and memory nodes it was given. Planning is
// pure (placement + topology + config in, a thread layout out); applying is
// a thin layer of system calls that reports what the kernel allowed.
//
// Order at start: read placement -> plan_threads() -> apply_memory_policy()
// and bind each worker -> only then load the model, so its weights are
// first-touched on the right node.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"

namespace numaserve::placement {

struct ThreadConfig {
  unsigned workers = 0;            // inference workers; 0 = derive from the cpuset
  unsigned intra_op_threads = 0;   // per worker; 0 = derive
};

struct Worker {
  CpuSet cpus;  // the worker and its intra-op threads run here
};

struct ThreadPlan {
  CpuSet cpus;                 // what the process may use
  NodeSet mems;
  NodeSet numa_nodes;          // nodes the CPUs are on
  // Where memory is bound: the allowed nodes local to the CPUs, else all
  // allowed nodes. A process pinned to one node's CPUs (taskset, or a
  // supervisor's worker) gets that node's memory even when the cgroup
  // allows every node.
  NodeSet memory_nodes;
  std::vector<Worker> workers;
  unsigned intra_op_threads = 1;
  std::vector<std::string> notes;  // check_placement()'s warnings
};

// Workers x intra-op threads never exceed the cpuset's CPUs. By default one
// worker per physical core group: whole cores, SMT siblings kept together.
// Errors when the configuration asks for more threads than CPUs.
Result<ThreadPlan> plan_threads(const Placement& placement, const Topology& topology, const ThreadConfig& config);

// set_mempolicy(MPOL_BIND) to `mems`. Containers usually forbid it (seccomp
// without CAP_SYS_NICE); then the cgroup's cpuset.mems and first touch from
// pinned threads keep memory local, and `reason` says so.
struct MemoryPolicyOutcome {
  bool applied = false;
  std::string reason;  // why not, when not
};
MemoryPolicyOutcome apply_memory_policy(const NodeSet& mems);

// Pins the calling thread; the error names the CPUs and the errno.
Status bind_current_thread(const CpuSet& cpus);

// A block of memory to locate, e.g. one of the model's weight tensors.
struct MemoryRange {
  const void* start = nullptr;
  std::size_t bytes = 0;
};

// Where the pages of some memory are, asked of the kernel page by page
// (move_pages without moving): the proof that the model's weights are local.
struct PageLocations {
  std::map<unsigned, std::uint64_t> pages_per_node;
  std::uint64_t not_resident = 0;  // never touched, or swapped out
  std::uint64_t resident() const;
  // Share of the resident pages on `nodes`; 1 when nothing is resident.
  double share_on(const NodeSet& nodes) const;
};
Result<PageLocations> locate_pages(const std::vector<MemoryRange>& ranges);

// The process's threads as the kernel sees them, for /placement: every
// worker and every OpenMP thread it started, with the CPUs it may run on.
struct ThreadInfo {
  int tid = 0;
  std::string name;
  CpuSet allowed_cpus;
};
// Reads <proc>/self/task; threads that end while it reads are skipped.
std::vector<ThreadInfo> list_threads(const std::filesystem::path& proc = "/proc");

}  // namespace numaserve::placement
