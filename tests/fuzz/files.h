#pragma once
// For harnesses whose decoder reads files (a /proc + /sys tree, an hwloc
// XML export): a scratch directory of this process on tmpfs when there is
// one, and a tree written there from the input.

#include <unistd.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace numaserve::fuzz {

// NUMASERVE_FUZZ_SCRATCH names it instead where set: the fuzz smoke gives
// every checkout a path of the same length, since the path reaches the
// decoders' error messages and so the inputs' coverage.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    if (const char* given = std::getenv("NUMASERVE_FUZZ_SCRATCH"); given != nullptr && *given != '\0') {
      std::filesystem::create_directories(given);
      return std::filesystem::path(given);
    }
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    auto d = base / ("numaserve-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& file, std::string_view content) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary).write(content.data(), static_cast<std::streamsize>(content.size()));
}

}  // namespace numaserve::fuzz
