#pragma once
// Reading small kernel files (sysfs, procfs, cgroupfs) into strings, with
// errors that name the path.

#include <filesystem>
#include <string>

#include "numaserve/common/result.h"

namespace numaserve {

Result<std::string> read_text_file(const std::filesystem::path& path);

// `path` re-rooted under `root`: ("/host", "/proc/self/status") ->
// "/host/proc/self/status". Root "/" leaves it unchanged.
std::filesystem::path under_root(const std::filesystem::path& root,
                                 const std::filesystem::path& path);

}  // namespace numaserve
