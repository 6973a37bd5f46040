#pragma once
// Where the test fixtures are: the source tree's fixture folder and the
// build tree's unpacked sysfs captures, both compiled in by CMake.

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace numaserve::testing {

inline std::filesystem::path fixtures_dir() { return NUMASERVE_FIXTURES_DIR; }

// A captured tree unpacks to <name>/<top directory>/{sys,proc}; the top
// directory's name is the capture's own (not always <name>).
inline std::filesystem::path sysfs_root(const std::string& name) {
  const auto dir = std::filesystem::path(NUMASERVE_SYSFS_FIXTURES_DIR) / name;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory()) return entry.path();
  }
  ADD_FAILURE() << "no unpacked capture in " << dir;
  return dir;
}

}  // namespace numaserve::testing
