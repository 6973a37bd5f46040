// CPU and node sets in the kernel's two text forms (cpulist files and
// Cpus_allowed masks): never a crash; what parses round-trips —
// parse(format(x)) == x in both forms, and the list form is canonical; no
// id beyond the parsers' cap.
#include "fuzz.h"
#include "numaserve/common/cpu_set.h"

using namespace numaserve;

namespace {

void round_trip(const CpuSet& set) {
  for (unsigned id : set.ids()) FUZZ_CHECK(id <= CpuSet::kMaxId, "id %u", id);
  const auto list = CpuSet::parse_list(set.to_list());
  FUZZ_CHECK(list && *list == set, "the list form %s does not parse back", set.to_list().c_str());
  FUZZ_CHECK(list->to_list() == set.to_list(), "%s", "the list form is not canonical");
  const auto mask = CpuSet::parse_mask(set.to_mask());
  FUZZ_CHECK(mask && *mask == set, "the mask form %s does not parse back", set.to_mask().c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = fuzz::text(data, size);
  if (const auto list = CpuSet::parse_list(text)) round_trip(*list);
  if (const auto mask = CpuSet::parse_mask(text)) round_trip(*mask);
  return 0;
}
