// The service's options file (`numaserve serve --config`, the chart's
// numaserve.yaml), on the binary's own table: never a crash; a refusal names
// the file; what is accepted is within the declared bounds (a port, finite
// durations a clock can hold).
#include "fuzz.h"
#include "options/serve_options.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  serve::ServeOptions o;
  OptionTable table(serve::serve_options(o));
  const auto applied = table.apply_yaml(std::string(fuzz::text(data, size)), "numaserve.yaml");
  if (!applied) {
    FUZZ_CHECK(applied.error().message.find("numaserve.yaml") != std::string::npos, "a refusal not naming the file: %s",
               applied.error().message.c_str());
    return 0;
  }
  FUZZ_CHECK(o.port <= 65535, "port %u", o.port);
  for (double seconds : {o.max_queue_delay, o.header_timeout, o.body_timeout, o.idle_timeout, o.shutdown_delay,
                         o.shutdown_grace}) {
    FUZZ_CHECK(seconds >= 0 && seconds <= kMaxSeconds, "a duration of %g s", seconds);
  }
  return 0;
}
