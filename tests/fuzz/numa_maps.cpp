// /proc/self/numa_maps: never a crash; every mapping accepted has a page
// size, and the bytes on each node, over all mappings, add up without
// overflow to no more than an address space.
#include "fuzz.h"
#include "numaserve/common/numa_maps.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto maps = parse_numa_maps(fuzz::text(data, size));
  if (!maps) return 0;
  for (const auto& m : *maps) {
    FUZZ_CHECK(m.page_bytes > 0, "%s", "a mapping with pages of 0 bytes");
  }
  constexpr std::uint64_t kAddressSpace = std::uint64_t{1} << 57;
  std::uint64_t total = 0;  // never past kAddressSpace, so the sums cannot wrap
  for (const auto& m : *maps) {
    for (const auto& [node, pages] : m.pages_per_node) {
      FUZZ_CHECK(pages <= (kAddressSpace - total) / m.page_bytes, "%s", "more bytes than a 57-bit address space");
      total += pages * m.page_bytes;
    }
  }
  std::uint64_t by_node = 0;
  for (const auto& [node, bytes] : bytes_per_node(*maps)) by_node += bytes;
  FUZZ_CHECK(by_node == total, "%s", "bytes_per_node disagrees with the mappings");
  return 0;
}
