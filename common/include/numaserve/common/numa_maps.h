#pragma once
// Where a process's pages are, from /proc/<pid>/numa_maps: how we prove that
// memory is node-local (the model's weights, a test allocation).

#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve {

struct NumaMapping {
  std::uintptr_t start = 0;
  std::map<unsigned, std::uint64_t> pages_per_node;  // node -> pages (of the mapping's page size)
  std::uint64_t page_bytes = 4096;                    // kernelpagesize_kB * 1024
};

Result<std::vector<NumaMapping>> parse_numa_maps(std::string_view text);

// Bytes of `mappings` resident on each node, summed.
std::map<unsigned, std::uint64_t> bytes_per_node(const std::vector<NumaMapping>& mappings);

}  // namespace numaserve
