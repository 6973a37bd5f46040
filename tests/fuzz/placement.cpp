// The process's own placement as a container runtime leaves it: /proc/self
// (status, cgroup, mountinfo) and the cgroup v1/v2 files (cpuset lists,
// cpu.max, cpu.cfs_*), read by the real discovery from a tree the input
// describes — records "relative/path\x1fcontent", separated by \x1e (the
// seeds are the cgroup fixture trees). Never a crash; a refusal names a
// file; what is accepted holds real ids and a positive, finite CPU limit.
#include <cmath>

#include "files.h"
#include "fuzz.h"
#include "numaserve/common/placement.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::size_t run = 0;
  const auto root = fuzz::scratch() / ("tree-" + std::to_string(run++));
  auto input = fuzz::text(data, size);
  while (!input.empty()) {
    const auto end = input.find('\x1e');
    const auto record = input.substr(0, end);
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
    const auto split = record.find('\x1f');
    if (split == std::string_view::npos) continue;
    const std::string path(record.substr(0, split));
    // Relative paths inside the tree only: the harness writes them.
    if (path.empty() || path.size() > 200 || path.front() == '/' || path.find("..") != std::string::npos ||
        path.find('\0') != std::string::npos) {
      continue;
    }
    std::error_code ec;
    const auto file = root / path;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (!ec && !std::filesystem::is_directory(file, ec)) fuzz::write_file(file, record.substr(split + 1));
  }
  const auto placement = discover_placement(root);
  if (placement) {
    for (unsigned id : (placement->affinity | placement->mems_allowed).ids()) FUZZ_CHECK(id <= CpuSet::kMaxId, "id %u", id);
    if (placement->cgroup && placement->cgroup->cpu_limit) {
      const double limit = *placement->cgroup->cpu_limit;
      FUZZ_CHECK(limit > 0 && std::isfinite(limit), "a CPU limit of %g", limit);
    }
  } else {
    FUZZ_CHECK(placement.error().message.find('/') != std::string::npos, "a refusal naming no file: %s",
               placement.error().message.c_str());
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
