// model.yaml, the contract a model directory brings: never a crash (yaml-cpp
// throws; the reader must not let it out); a refusal names the file; what
// is accepted is usable — every embedding feature names a table that has
// rows, names are unique per source, and a standardized feature does not
// divide by zero.
#include <set>

#include "features/model_spec.h"
#include "fuzz.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto spec = features::parse_model_spec(std::string(fuzz::text(data, size)), "model.yaml");
  if (!spec) {
    FUZZ_CHECK(spec.error().message.find("model.yaml") != std::string::npos, "a refusal not naming the file: %s",
               spec.error().message.c_str());
    return 0;
  }
  std::set<std::pair<int, std::string>> seen;
  for (const auto& f : spec->features) {
    FUZZ_CHECK(seen.insert({static_cast<int>(f.source), f.name}).second, "feature %s twice", f.name.c_str());
    if (f.kind != features::Kind::kNumeric) {
      const auto table = spec->tables.find(f.table);
      FUZZ_CHECK(table != spec->tables.end() && table->second > 0, "feature %s: table '%s' without rows",
                 f.name.c_str(), f.table.c_str());
    }
    if (f.transform == features::Transform::kStandardize) FUZZ_CHECK(f.stddev > 0, "feature %s: std %g", f.name.c_str(), f.stddev);
  }
  return 0;
}
