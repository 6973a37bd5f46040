// The agent's options file, on the binary's own table (every subcommand's
// rows): never a crash; a refusal names the file; what is accepted is
// within the declared bounds.
#include "fuzz.h"
#include "options/agent_options.h"

using namespace numaserve;
namespace options = numaserve::agent::options;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  options::AgentOptions o;
  auto table = options::table_for(o, options::kSource | options::kPlan | options::kRun);
  const auto applied = table.apply_yaml(std::string(fuzz::text(data, size)), "agent.yaml");
  if (!applied) {
    FUZZ_CHECK(applied.error().message.find("agent.yaml") != std::string::npos, "a refusal not naming the file: %s",
               applied.error().message.c_str());
    return 0;
  }
  FUZZ_CHECK(o.endpoint.port <= 65535, "port %u", o.endpoint.port);
  const double interval = o.loop.interval.count();
  FUZZ_CHECK(interval >= 0 && interval <= kMaxSeconds, "interval %g s", interval);
  const double fraction = o.updater.plan.pod_memory_fraction;
  FUZZ_CHECK(fraction >= 0 && fraction <= 1, "pod memory fraction %g", fraction);
  return 0;
}
