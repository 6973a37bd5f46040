#pragma once
// Reads what hwloc's lstopo printed for a captured machine (the `.output`
// files of hwloc's test suite, console format) into the facts our discovery
// must reproduce. It is the test's independent oracle, so it parses the text
// itself rather than asking hwloc.

#include <cstdint>
#include <filesystem>
#include <map>
#include <utility>

#include "numaserve/common/cpu_set.h"
#include "numaserve/common/result.h"

namespace numaserve::testing {

struct LstopoNode {
  unsigned logical_index = 0;
  CpuSet cpus;  // PUs below the node's parent: hwloc's locality of the node
  std::uint64_t local_kb = 0;
};

struct LstopoOutput {
  std::map<unsigned, LstopoNode> nodes;  // by OS index (P#)
  std::map<std::pair<unsigned, unsigned>, unsigned> latency;  // (from, to) OS indexes -> distance
  CpuSet not_represented;  // "N processors not represented in topology: 0x..."
};

Result<LstopoOutput> parse_lstopo_output(const std::filesystem::path& file);

}  // namespace numaserve::testing
