#include "numa/numa.h"

#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "numaserve/common/numa_maps.h"
#include "numaserve/common/text_file.h"

namespace numaserve::numa {
namespace {

constexpr std::size_t kBitsPerWord = 8 * sizeof(unsigned long);

// The kernel's bitmap of CPU or node ids: what cpu_set_t is, and what
// set_mempolicy reads.
std::vector<unsigned long> kernel_mask(const std::vector<unsigned>& ids) {
  std::vector<unsigned long> mask(ids.empty() ? 0 : ids.back() / kBitsPerWord + 1, 0);
  for (unsigned id : ids) mask[id / kBitsPerWord] |= 1ul << (id % kBitsPerWord);
  return mask;
}

// maxnode counts bits, and the kernel reads one fewer than given.
long set_memory_policy(const std::vector<unsigned long>& mask) {
  return set_mempolicy(MPOL_BIND, mask.data(), mask.size() * kBitsPerWord + 1);
}

}  // namespace

Status bind_current_thread(const CpuSet& cpus) {
  if (cpus.empty()) return make_error(Error::Code::kInvalidArgument, "cannot bind a thread to no CPUs");
  const auto mask = kernel_mask(cpus.ids());
  const int rc = pthread_setaffinity_np(pthread_self(), mask.size() * sizeof(unsigned long),
                                        reinterpret_cast<const cpu_set_t*>(mask.data()));
  if (rc != 0) {
    return make_error(Error::Code::kUnavailable, "cannot bind thread to CPUs " + cpus.to_list() + ": " + std::strerror(rc));
  }
  return {};
}

MemoryPolicyOutcome bind_memory(const NodeSet& mems) {
  if (mems.empty()) return {false, "no memory nodes to bind to"};
  if (set_memory_policy(kernel_mask(mems.ids())) == 0) return {true, ""};
  const int err = errno;
  if (err == EPERM) {
    return {false, "set_mempolicy is not permitted here (a container without CAP_SYS_NICE): memory stays local "
                   "through the cgroup's cpuset.mems and first touch from pinned threads"};
  }
  return {false, std::string("set_mempolicy(MPOL_BIND, ") + mems.to_list() + "): " + std::strerror(err)};
}

ForkSafeBinding::ForkSafeBinding(const CpuSet& cpus, const std::optional<NodeSet>& mems)
    : cpu_mask_(kernel_mask(cpus.ids())), node_mask_(mems ? kernel_mask(mems->ids()) : std::vector<unsigned long>{}) {}

void ForkSafeBinding::apply() const noexcept {
  if (!cpu_mask_.empty()) {
    sched_setaffinity(0, cpu_mask_.size() * sizeof(unsigned long), reinterpret_cast<const cpu_set_t*>(cpu_mask_.data()));
  }
  if (!node_mask_.empty()) set_memory_policy(node_mask_);
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
      const int error = errno;
      if (error == EPERM || error == ENOSYS) return locate_mappings(ranges);
      return make_error(Error::Code::kUnavailable, std::string("move_pages: ") + std::strerror(error));
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

Result<PageLocations> locate_mappings(const std::vector<MemoryRange>& ranges) {
  auto text = read_text_file("/proc/self/numa_maps");
  if (!text) return tl::unexpected(text.error());
  auto maps = parse_numa_maps(*text);
  if (!maps) return tl::unexpected(maps.error());
  std::sort(maps->begin(), maps->end(), [](const NumaMapping& a, const NumaMapping& b) { return a.start < b.start; });
  // numa_maps names where each mapping starts, not where it ends: a range
  // lies in the last mapping that starts at or before it, and in any that
  // start within it.
  std::set<std::size_t> held;
  for (const auto& range : ranges) {
    if (range.bytes == 0) continue;
    const auto start = reinterpret_cast<std::uintptr_t>(range.start);
    auto it = std::upper_bound(maps->begin(), maps->end(), start,
                               [](std::uintptr_t address, const NumaMapping& m) { return address < m.start; });
    if (it != maps->begin()) held.insert(static_cast<std::size_t>(it - maps->begin()) - 1);
    for (; it != maps->end() && it->start < start + range.bytes; ++it) held.insert(static_cast<std::size_t>(it - maps->begin()));
  }
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  PageLocations out;
  out.method = "numa_maps";
  for (const std::size_t i : held) {
    for (const auto& [node, pages] : (*maps)[i].pages_per_node) out.pages_per_node[node] += pages * ((*maps)[i].page_bytes / page);
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

}  // namespace numaserve::numa
