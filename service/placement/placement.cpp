#include "placement/placement.h"

#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "numaserve/common/text_file.h"

namespace numaserve::placement {

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

  // The cpuset's physical cores (sibling groups intersected with the cpuset).
  // CPUs of no node (their node is offline) count as one core each.
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

  // Hand out whole cores round the workers so siblings stay together; with
  // fewer cores than workers, split the remaining CPUs one by one.
  plan.workers.resize(workers);
  if (cores.size() >= workers) {
    for (std::size_t i = 0; i < cores.size(); ++i) plan.workers[i % workers].cpus |= cores[i];
  } else {
    const auto ids = plan.cpus.ids();
    for (std::size_t i = 0; i < ids.size(); ++i) plan.workers[i % workers].cpus.insert(ids[i]);
  }
  return plan;
}

MemoryPolicyOutcome apply_memory_policy(const NodeSet& mems) {
  if (mems.empty()) return {false, "no memory nodes to bind to"};
  const unsigned max_node = mems.ids().back();
  std::vector<unsigned long> mask(max_node / (8 * sizeof(unsigned long)) + 1, 0);
  for (unsigned node : mems.ids()) mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
  // maxnode counts bits and the kernel reads one fewer than given.
  if (set_mempolicy(MPOL_BIND, mask.data(), mask.size() * 8 * sizeof(unsigned long) + 1) == 0) return {true, ""};
  const int err = errno;
  if (err == EPERM) {
    return {false, "set_mempolicy is not permitted here (a container without CAP_SYS_NICE): memory stays local "
                   "through the cgroup's cpuset.mems and first touch from pinned threads"};
  }
  return {false, std::string("set_mempolicy(MPOL_BIND, ") + mems.to_list() + "): " + std::strerror(err)};
}

Status bind_current_thread(const CpuSet& cpus) {
  if (cpus.empty()) return make_error(Error::Code::kInvalidArgument, "cannot bind a thread to no CPUs");
  const unsigned max_cpu = cpus.ids().back();
  cpu_set_t* set = CPU_ALLOC(max_cpu + 1);
  const std::size_t size = CPU_ALLOC_SIZE(max_cpu + 1);
  CPU_ZERO_S(size, set);
  for (unsigned cpu : cpus.ids()) CPU_SET_S(cpu, size, set);
  const int rc = pthread_setaffinity_np(pthread_self(), size, set);
  CPU_FREE(set);
  if (rc != 0) {
    return make_error(Error::Code::kUnavailable, "cannot bind thread to CPUs " + cpus.to_list() + ": " + std::strerror(rc));
  }
  return {};
}

std::uint64_t PageLocations::resident() const {
  std::uint64_t total = 0;
  for (const auto& [node, pages] : pages_per_node) total += pages;
  return total;
}

double PageLocations::share_on(const NodeSet& nodes) const {
  const std::uint64_t total = resident();
  if (total == 0) return 1;
  std::uint64_t local = 0;
  for (const auto& [node, pages] : pages_per_node) {
    if (nodes.contains(node)) local += pages;
  }
  return static_cast<double>(local) / static_cast<double>(total);
}

Result<PageLocations> locate_pages(const std::vector<MemoryRange>& ranges) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  std::vector<void*> pages;
  for (const auto& range : ranges) {
    if (range.bytes == 0) continue;
    const auto first = reinterpret_cast<std::uintptr_t>(range.start) & ~(page - 1);
    const auto end = reinterpret_cast<std::uintptr_t>(range.start) + range.bytes;
    for (std::uintptr_t p = first; p < end; p += page) pages.push_back(reinterpret_cast<void*>(p));
  }
  // Tensors share pages at their edges; count each page once.
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());

  PageLocations out;
  constexpr std::size_t kChunk = 4096;
  std::vector<int> status(kChunk);
  for (std::size_t i = 0; i < pages.size(); i += kChunk) {
    const std::size_t n = std::min(kChunk, pages.size() - i);
    // nodes == nullptr: report each page's node, move nothing.
    if (move_pages(0, n, pages.data() + i, nullptr, status.data(), 0) != 0) {
      return make_error(Error::Code::kUnavailable, std::string("move_pages: ") + std::strerror(errno));
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (status[k] >= 0) {
        ++out.pages_per_node[static_cast<unsigned>(status[k])];
      } else {
        ++out.not_resident;
      }
    }
  }
  return out;
}

std::vector<ThreadInfo> list_threads(const std::filesystem::path& proc) {
  std::vector<ThreadInfo> threads;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc / "self" / "task", ec)) {
    auto status = read_text_file(entry.path() / "status");
    if (!status) continue;
    ThreadInfo info;
    info.tid = std::atoi(entry.path().filename().c_str());
    std::istringstream lines(*status);
    for (std::string line; std::getline(lines, line);) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = line.substr(0, colon);
      const auto begin = line.find_first_not_of(" \t", colon + 1);
      const std::string value = begin == std::string::npos ? "" : line.substr(begin);
      if (key == "Name") info.name = value;
      if (key == "Cpus_allowed_list") info.allowed_cpus = CpuSet::parse_list(value).value_or(CpuSet{});
    }
    threads.push_back(std::move(info));
  }
  std::sort(threads.begin(), threads.end(), [](const ThreadInfo& a, const ThreadInfo& b) { return a.tid < b.tid; });
  return threads;
}

}  // namespace numaserve::placement
