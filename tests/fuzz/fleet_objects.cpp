// The fleet's objects as cluster-plan reads them (kubectl's YAML: a v1 List
// or documents of Node and NodeResourceTopology objects): never a crash; a
// refusal says why; what reads is planned with every node accounted for
// exactly once (a class or unplanned, with a reason) and no class using
// more CPUs than it has.
#include <set>

#include "fleet/fleet.h"
#include "fuzz.h"

using namespace numaserve::kube::fleet;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto nodes = read_objects(numaserve::fuzz::text(data, size), "fuzz.yaml");
  if (!nodes) {
    FUZZ_CHECK(!nodes.error().message.empty(), "%s", "a refusal without a message");
    return 0;
  }
  for (const Sizing sizing : {Sizing::kPerClass, Sizing::kUniform}) {
    auto plan = plan_fleet(*nodes, {.sizing = sizing});
    if (!plan) {
      FUZZ_CHECK(plan.error().message.starts_with("no node can be planned"), "%s", plan.error().message.c_str());
      continue;
    }
    std::multiset<std::string> seen;
    for (const auto& c : plan->classes) {
      FUZZ_CHECK(c.cpus > 0 && c.memory_bytes > 0 && c.replicas_per_machine > 0, "class %s has an empty replica",
                 c.name.c_str());
      FUZZ_CHECK(c.cpus_used() <= c.cpus_allocatable(), "class %s uses more CPUs than it has", c.name.c_str());
      seen.insert(c.nodes.begin(), c.nodes.end());
    }
    for (const auto& u : plan->unplanned) {
      FUZZ_CHECK(!u.reason.empty(), "%s unplanned without a reason", u.node.c_str());
      seen.insert(u.node);
    }
    FUZZ_CHECK(seen.size() == nodes->size() && std::set<std::string>(seen.begin(), seen.end()).size() == seen.size(),
               "%zu nodes read, %zu accounted for", nodes->size(), seen.size());
  }
  return 0;
}
