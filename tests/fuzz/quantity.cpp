// Kubernetes quantities of bytes ("8Mi", "1.5G", "100e6"): never a crash;
// what parses round-trips through its canonical form.
#include "fuzz.h"
#include "numaserve/common/quantity.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = parse_quantity(fuzz::text(data, size));
  if (!bytes) {
    FUZZ_CHECK(!bytes.error().message.empty(), "%s", "a refusal without a message");
    return 0;
  }
  const std::string canonical = format_quantity(*bytes);
  const auto again = parse_quantity(canonical);
  FUZZ_CHECK(again && *again == *bytes, "%llu bytes formatted as %s do not parse back",
             static_cast<unsigned long long>(*bytes), canonical.c_str());
  return 0;
}
