#pragma once
// The service's NUMA system calls, and nothing else: pin a thread, bind
// memory (also between fork and exec, for the supervisor's workers), and ask
// the kernel where threads and pages are. Deciding where is pure and lives
// elsewhere (threads/, supervisor's plan_replicas, common's discovery);
// this is the one place that acts on it.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/cpu_set.h"
#include "numaserve/common/result.h"

namespace numaserve::numa {

// Pins the calling thread; the error names the CPUs and the errno.
Status bind_current_thread(const CpuSet& cpus);

// set_mempolicy(MPOL_BIND) to `mems` for the calling thread and what it
// starts later. Containers usually forbid it (seccomp without
// CAP_SYS_NICE); then the cgroup's cpuset.mems and first touch from pinned
// threads keep memory local, and `reason` says so.
struct MemoryPolicyOutcome {
  bool applied = false;
  std::string reason;  // why not, when not
};
MemoryPolicyOutcome bind_memory(const NodeSet& mems);

// The same two bindings for a child between fork and exec, where only
// async-signal-safe calls may run: the kernel masks are built here, before
// fork, and apply() only makes the two system calls. Their errors are not
// reported (nothing may be logged there); the child binds again itself.
class ForkSafeBinding {
 public:
  ForkSafeBinding(const CpuSet& cpus, const std::optional<NodeSet>& mems);
  void apply() const noexcept;

 private:
  std::vector<unsigned long> cpu_mask_;
  std::vector<unsigned long> node_mask_;  // empty: leave the memory policy
};

// A block of memory to locate, e.g. one of the model's weight tensors.
struct MemoryRange {
  const void* start = nullptr;
  std::size_t bytes = 0;
};

// Where the pages of some memory are, asked of the kernel page by page
// (move_pages without moving): the proof that the model's weights are local.
struct PageLocations {
  // "move_pages", or "numa_maps" (locate_mappings) where that was refused.
  std::string method = "move_pages";
  std::map<unsigned, std::uint64_t> pages_per_node;
  std::uint64_t not_resident = 0;  // never touched, or swapped out
  std::uint64_t resident() const;
  // Share of the resident pages on `nodes`; 1 when nothing is resident.
  double share_on(const NodeSet& nodes) const;
};
// Falls back to locate_mappings where move_pages is refused: the container
// runtimes' default seccomp profile allows it only with CAP_SYS_NICE, which
// a "restricted" pod cannot have.
Result<PageLocations> locate_pages(const std::vector<MemoryRange>& ranges);
// Coarser, from /proc/self/numa_maps: every page of the mappings that hold
// the ranges, whatever else they hold (the heap's other allocations),
// counted in base pages.
Result<PageLocations> locate_mappings(const std::vector<MemoryRange>& ranges);

// The process's threads as the kernel sees them, for /placement: every
// worker and every OpenMP thread it started, with the CPUs it may run on.
struct ThreadInfo {
  int tid = 0;
  std::string name;
  CpuSet allowed_cpus;
};
// Reads <proc>/self/task; threads that end while it reads are skipped.
std::vector<ThreadInfo> list_threads(const std::filesystem::path& proc = "/proc");

}  // namespace numaserve::numa
