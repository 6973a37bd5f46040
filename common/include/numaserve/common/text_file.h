#pragma once
// Reading small kernel files (sysfs, procfs, cgroupfs) into strings, with
// errors that name the path.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve {

Result<std::string> read_text_file(const std::filesystem::path& path);

// The lines of a file's text, without their '\n', as std::getline gives
// them: a last line without one counts, the empty one after it does not.
std::vector<std::string> split_lines(std::string_view text);

// `path` re-rooted under `root`: ("/host", "/proc/self/status") ->
// "/host/proc/self/status". Root "/" leaves it unchanged.
std::filesystem::path under_root(const std::filesystem::path& root,
                                 const std::filesystem::path& path);

}  // namespace numaserve
