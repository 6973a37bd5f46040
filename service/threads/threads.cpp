#include "threads/threads.h"

#include <algorithm>

namespace numaserve::threads {
namespace {

// The cpuset's physical cores (sibling groups intersected with the cpuset),
// and the plan's NUMA nodes on the way. CPUs of no node (their node is
// offline) count as one core each.
std::vector<CpuSet> cores_of(ThreadPlan& plan, const Topology& topology) {
  std::vector<CpuSet> cores;
  CpuSet covered;
  for (const auto& node : topology.nodes) {
    if (node.cpus.intersects(plan.cpus)) plan.numa_nodes.insert(node.os_index);
    for (const auto& core : node.cores) {
      const CpuSet mine = core & plan.cpus;
      if (mine.empty()) continue;
      cores.push_back(mine);
      covered |= mine;
    }
  }
  for (unsigned cpu : (plan.cpus - covered).ids()) cores.push_back(CpuSet{cpu});
  return cores;
}

// Hands out whole cores round the workers so siblings stay together; with
// fewer cores than workers, splits the CPUs one by one.
void assign_cpus(ThreadPlan& plan, const std::vector<CpuSet>& cores, unsigned workers) {
  plan.workers.resize(workers);
  if (cores.size() >= workers) {
    for (std::size_t i = 0; i < cores.size(); ++i) plan.workers[i % workers].cpus |= cores[i];
  } else {
    const auto ids = plan.cpus.ids();
    for (std::size_t i = 0; i < ids.size(); ++i) plan.workers[i % workers].cpus.insert(ids[i]);
  }
}

}  // namespace

Result<ThreadPlan> plan_threads(const Placement& placement, const Topology& topology, const ThreadConfig& config) {
  ThreadPlan plan;
  plan.cpus = placement.cpus() & topology.online_cpus;
  plan.mems = placement.mems();
  if (plan.cpus.empty()) {
    return make_error(Error::Code::kUnavailable,
                      "no usable CPUs: affinity " + placement.affinity.to_list() + ", online " +
                          topology.online_cpus.to_list());
  }
  const std::size_t cpu_count = plan.cpus.count();

  const std::vector<CpuSet> cores = cores_of(plan, topology);
  plan.memory_nodes = plan.mems & plan.numa_nodes;
  if (plan.memory_nodes.empty()) plan.memory_nodes = plan.mems;
  // Settings that work but hurt (spanning nodes, remote memory, a quota below
  // the cpuset) are the shared placement checks' to word.
  plan.notes = check_placement(placement, &topology);

  // Workers: as asked, else one per group of intra-op-threads CPUs; intra-op
  // threads: as asked, else what the CPUs allow per worker (at least 1).
  unsigned workers = config.workers;
  unsigned intra = config.intra_op_threads;
  if (workers == 0 && intra == 0) {
    workers = static_cast<unsigned>(cores.size());
    intra = static_cast<unsigned>(cpu_count / workers);
  } else if (workers == 0) {
    workers = std::max<unsigned>(1, static_cast<unsigned>(cpu_count / intra));
  } else if (intra == 0) {
    intra = std::max<unsigned>(1, static_cast<unsigned>(cpu_count / workers));
  }
  if (static_cast<std::size_t>(workers) * intra > cpu_count) {
    return make_error(Error::Code::kInvalidArgument,
                      std::to_string(workers) + " workers x " + std::to_string(intra) + " intra-op threads need " +
                          std::to_string(workers * intra) + " CPUs, the cpuset has " + std::to_string(cpu_count) +
                          " (" + plan.cpus.to_list() + ")",
                      "workers");
  }
  plan.intra_op_threads = intra;
  assign_cpus(plan, cores, workers);
  return plan;
}

}  // namespace numaserve::threads
