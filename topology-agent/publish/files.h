#pragma once
// Hint files on the node (a hostPath the operator and tools read), written so
// that a reader never sees half a file and an unchanged file is not touched.

#include <filesystem>
#include <string>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve::agent::publish {

// Writes `content` to `dir/name` through a temporary file in the same
// directory, fsync, rename and a directory fsync; does nothing when the file
// already holds exactly `content`. Returns whether the file changed.
Result<bool> write_if_changed(const std::filesystem::path& dir, const std::string& name,
                              const std::string& content);

struct HintFile {
  std::string name;
  std::string content;
};

// Writes each file; stops at the first failure, whose error names the path.
// Returns the names that changed.
Result<std::vector<std::string>> write_hints(const std::filesystem::path& dir,
                                             const std::vector<HintFile>& files);

// Removes the named files where present (a hint that no longer holds must
// not be read as current). Returns the names removed.
Result<std::vector<std::string>> remove_hints(const std::filesystem::path& dir, const std::vector<std::string>& names);

}  // namespace numaserve::agent::publish
