// /proc/self/numa_maps: never a crash; every mapping accepted has a page
// size and page counts that add up without overflow.
#include "fuzz.h"
#include "numaserve/common/numa_maps.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto maps = parse_numa_maps(fuzz::text(data, size));
  if (!maps) return 0;
  for (const auto& m : *maps) {
    FUZZ_CHECK(m.page_bytes > 0, "%s", "a mapping with pages of 0 bytes");
    std::uint64_t total = 0;
    for (const auto& [node, pages] : m.pages_per_node) {
      FUZZ_CHECK(total + pages >= total, "%s", "page counts overflow");
      total += pages;
    }
  }
  return 0;
}
