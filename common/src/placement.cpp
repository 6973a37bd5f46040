#include "numaserve/common/placement.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "cgroup.h"
#include "numaserve/common/text_file.h"

namespace numaserve {

namespace fs = std::filesystem;

namespace {

Result<CpuSet> live_affinity() {
  // The mask must be large enough for the kernel's CPU count; grow until it is.
  for (int ncpus = 1024; ncpus <= (1 << 16); ncpus *= 2) {
    cpu_set_t* mask = CPU_ALLOC(ncpus);
    const std::size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, mask);
    if (sched_getaffinity(0, size, mask) == 0) {
      CpuSet out;
      for (int cpu = 0; cpu < ncpus; ++cpu) {
        if (CPU_ISSET_S(cpu, size, mask)) out.insert(static_cast<unsigned>(cpu));
      }
      CPU_FREE(mask);
      return out;
    }
    const int err = errno;
    CPU_FREE(mask);
    if (err != EINVAL) {
      return make_error(Error::Code::kIo, std::string("sched_getaffinity: ") + std::strerror(err));
    }
  }
  return make_error(Error::Code::kInternal, "sched_getaffinity: mask larger than 65536 CPUs");
}

Result<CpuSet> status_field(const std::string& status, const fs::path& file, std::string_view key) {
  for (const std::string& line : split_lines(status)) {
    if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ':') continue;
    auto set = CpuSet::parse_list(line.substr(key.size() + 1));
    if (!set) return tl::unexpected(std::move(set.error()).with_context(file.string() + " " + std::string(key)));
    return *set;
  }
  return make_error(Error::Code::kNotFound, file.string() + " has no " + std::string(key) + " line",
                    std::string(key));
}

std::string format_cpus(double cpus) {
  std::ostringstream out;
  out << cpus;
  return out.str();
}

}  // namespace

CpuSet Placement::cpus() const {
  if (cgroup && cgroup->cpus) return affinity & *cgroup->cpus;
  return affinity;
}

NodeSet Placement::mems() const {
  if (cgroup && cgroup->mems) return mems_allowed & *cgroup->mems;
  return mems_allowed;
}

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

Result<Placement> discover_placement(const fs::path& root) {
  const fs::path status_path = under_root(root, "/proc/self/status");
  auto status = read_text_file(status_path);
  if (!status) return tl::unexpected(status.error());

  Placement out;
  auto mems = status_field(*status, status_path, "Mems_allowed_list");
  if (!mems) return tl::unexpected(mems.error());
  out.mems_allowed = *mems;

  auto affinity = (root.empty() || root == "/") ? live_affinity()
                                                : status_field(*status, status_path, "Cpus_allowed_list");
  if (!affinity) return tl::unexpected(affinity.error());
  out.affinity = *affinity;

  auto cgroup = discover_cgroup(root);
  if (!cgroup) return tl::unexpected(cgroup.error());
  out.cgroup = *cgroup;
  return out;
}

std::vector<std::string> check_placement(const Placement& placement, const Topology* topology) {
  std::vector<std::string> warnings;
  const CpuSet cpus = placement.cpus();
  if (cpus.empty()) warnings.push_back("no usable CPUs: affinity and cgroup cpuset do not intersect");
  if (placement.cgroup && placement.cgroup->cpu_limit) {
    const double limit = *placement.cgroup->cpu_limit;
    if (limit + 1e-9 < static_cast<double>(cpus.count())) {
      warnings.push_back("CPU limit of " + format_cpus(limit) + " CPUs over a cpuset of " +
                         std::to_string(cpus.count()) + " CPUs (" + cpus.to_list() +
                         "): threads sized to the cpuset will be throttled; request integer CPUs "
                         "with requests = limits so the kubelet's static CPU manager grants "
                         "exclusive CPUs");
    }
    if (std::abs(limit - std::round(limit)) > 1e-9) {
      warnings.push_back("fractional CPU limit of " + format_cpus(limit) +
                         " CPUs: the static CPU manager grants exclusive CPUs only to integer requests");
    }
  }
  if (topology == nullptr) return warnings;

  NodeSet cpu_nodes;
  for (const auto& node : topology->nodes) {
    if (node.cpus.intersects(cpus)) cpu_nodes.insert(node.os_index);
  }
  if (cpu_nodes.count() > 1) {
    warnings.push_back("CPUs " + cpus.to_list() + " span NUMA nodes " + cpu_nodes.to_list() +
                       ": part of every memory access is remote; run one replica per NUMA node");
  }
  const NodeSet mems = placement.mems();
  if (!cpu_nodes.empty() && !mems.empty() && !cpu_nodes.intersects(mems)) {
    warnings.push_back("CPUs " + cpus.to_list() + " are on NUMA node(s) " + cpu_nodes.to_list() +
                       " but memory is restricted to node(s) " + mems.to_list() +
                       ": every allocation is remote");
  }
  return warnings;
}

}  // namespace numaserve
