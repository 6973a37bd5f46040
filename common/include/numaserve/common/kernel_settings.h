#pragma once
// Kernel settings that decide whether explicit NUMA placement holds: the
// automatic NUMA balancer migrates pages and tasks behind our back, THP
// changes how model weights are backed, isolated / nohz_full CPUs are not
// for ordinary pods.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/cpu_set.h"
#include "numaserve/common/result.h"

namespace numaserve {

struct KernelSettings {
  std::optional<int> numa_balancing;          // /proc/sys/kernel/numa_balancing; nullopt when absent
  std::string transparent_hugepage;           // "always", "madvise", "never"; empty when absent
  std::string transparent_hugepage_defrag;
  CpuSet isolated_cpus;                       // isolcpus=
  CpuSet nohz_full_cpus;                      // nohz_full=
};

// Absent files are normal (kernels without NUMA balancing or THP) and leave
// the field empty; a file that exists but does not parse is an error naming it.
Result<KernelSettings> discover_kernel_settings(const std::filesystem::path& root = "/");

// What an operator should change, each with the reason.
std::vector<std::string> check_kernel_settings(const KernelSettings& settings);

}  // namespace numaserve
