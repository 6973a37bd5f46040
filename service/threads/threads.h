#pragma once
// The service's thread layout on the CPUs and memory nodes it was given:
// how many inference workers, which CPUs each, how many intra-op threads,
// where memory goes. Pure: placement + topology + config in, a plan out;
// numa/ carries it out.
//
// Order at start (startup/): read placement -> plan_threads() -> bind
// memory and this thread -> only then load the model, so its weights are
// first-touched on the right node.

#include <string>
#include <vector>

#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"

namespace numaserve::threads {

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

}  // namespace numaserve::threads
