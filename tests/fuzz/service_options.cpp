// The service's options file (`numaserve serve --config`, the chart's
// numaserve.yaml), on the binary's own table: never a crash; a refusal names
// the file; what is accepted is within the declared bounds (a port, finite
// durations a clock can hold).
#include "fuzz.h"
#include "options/serve_options.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  options::ServeOptions o;
  OptionTable table(options::serve_options(o));
  const auto applied = table.apply_yaml(std::string(fuzz::text(data, size)), "numaserve.yaml");
  if (!applied) {
    FUZZ_CHECK(applied.error().message.find("numaserve.yaml") != std::string::npos, "a refusal not naming the file: %s",
               applied.error().message.c_str());
    return 0;
  }
  FUZZ_CHECK(o.http.port >= 0 && o.http.port <= 65535, "port %d", o.http.port);
  FUZZ_CHECK(o.http.admin_port >= -1 && o.http.admin_port <= 65535, "admin port %d", o.http.admin_port);
  const double queue_delay = std::chrono::duration<double>(o.service.batching.max_queue_delay).count();
  for (double seconds : {queue_delay, o.http.header_timeout_seconds, o.http.body_timeout_seconds,
                         o.http.idle_timeout_seconds, o.http.shutdown_idle_seconds, o.shutdown_delay,
                         o.shutdown_grace}) {
    FUZZ_CHECK(seconds >= 0 && seconds <= kMaxSeconds, "a duration of %g s", seconds);
  }
  return 0;
}
