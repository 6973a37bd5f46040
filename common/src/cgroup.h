#pragma once
// Private to numaserve::common: the process's cgroup cpuset and CPU quota,
// for cgroup v2 (unified) and v1 (legacy and hybrid layouts), read under a
// root directory so tests can point it at fixture trees.

#include <filesystem>
#include <optional>

#include "numaserve/common/placement.h"

namespace numaserve {

// nullopt when the process has no cgroup information at all (no
// /proc/self/cgroup nor /proc/self/cpuset, or no cgroup mounted); an error
// when a file that exists cannot be read or parsed.
Result<std::optional<CgroupPlacement>> discover_cgroup(const std::filesystem::path& root);

}  // namespace numaserve
