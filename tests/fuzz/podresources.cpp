// The kubelet's PodResources answers as the agent decodes them, and the
// NodeResourceTopology made from them. The first two bytes (little-endian)
// say how many of the rest are the AllocatableResourcesResponse; the
// remainder is the ListPodResourcesResponse. Never a crash; a refusal names
// the source; what is accepted keeps every CPU id in range, the totals equal
// to what the containers hold, and no zone offers more than it allows.
#include "fuzz.h"
#include "podresources/podresources.h"
#include "publish/nrt.h"

using namespace numaserve;
namespace agent = numaserve::agent;

namespace {

const agent::discover::NodeReport& machine() {
  static const agent::discover::NodeReport report = [] {
    agent::discover::NodeReport r;
    r.topology = discover_topology(TopologySource::synthetic("pack:2 numa:1(memory=8GiB) core:2 pu:2")).value();
    return r;
  }();
  return report;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t split = std::min<std::size_t>(size - 2, data[0] | (data[1] << 8));
  const auto allocatable = fuzz::text(data + 2, split);
  const auto list = fuzz::text(data + 2 + split, size - 2 - split);
  const auto decoded = agent::podresources::decode(allocatable, list, "fuzz.sock");
  if (!decoded) {
    FUZZ_CHECK(decoded.error().message.find("fuzz.sock") != std::string::npos ||
                   decoded.error().message.find(" id ") != std::string::npos,
               "a refusal naming neither the source nor the id: %s", decoded.error().message.c_str());
    return 0;
  }
  CpuSet held;
  for (const auto& pod : decoded->pods) {
    for (const auto& container : pod.containers) held |= container.cpus;
  }
  FUZZ_CHECK(held == decoded->exclusive_cpus, "exclusive CPUs %s, containers hold %s",
             decoded->exclusive_cpus.to_list().c_str(), held.to_list().c_str());
  for (unsigned cpu : (held | decoded->allocatable->cpus).ids()) FUZZ_CHECK(cpu <= CpuSet::kMaxId, "CPU %u", cpu);

  agent::discover::NodeReport report = machine();
  report.allocations = *decoded;
  const auto nrt = agent::publish::make_node_resource_topology("fuzz", report, nullptr);
  for (const auto& zone : nrt["zones"]) {
    for (const auto& r : zone["resources"]) {
      FUZZ_CHECK(r["available"].get<std::uint64_t>() <= r["allocatable"].get<std::uint64_t>(), "%s",
                 r.dump().c_str());
    }
  }
  return 0;
}
