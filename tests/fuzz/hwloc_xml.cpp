// An hwloc XML export given to the topology loader (the agent's --xml):
// never a crash, whatever the file; what loads is a consistent model —
// nodes and packages in ascending, unique order, a core's CPUs inside its
// node's, no CPU both online and offline, distances as square as their
// nodes. Inputs above 256 KiB are not tried (exports of real machines are
// tens of KiB).
#include "files.h"
#include "fuzz.h"
#include "numaserve/common/topology.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (256u << 10)) return 0;
  const auto file = fuzz::scratch() / "topology.xml";
  fuzz::write_file(file, fuzz::text(data, size));
  const auto topology = discover_topology(TopologySource::xml(file.string()));
  if (!topology) {
    FUZZ_CHECK(topology.error().message.find(file.string()) != std::string::npos, "a refusal not naming the file: %s",
               topology.error().message.c_str());
    return 0;
  }
  const auto& t = *topology;
  for (std::size_t i = 1; i < t.nodes.size(); ++i) {
    FUZZ_CHECK(t.nodes[i - 1].os_index < t.nodes[i].os_index, "nodes %u, %u", t.nodes[i - 1].os_index,
               t.nodes[i].os_index);
  }
  for (std::size_t i = 1; i < t.packages.size(); ++i) {
    FUZZ_CHECK(t.packages[i - 1].os_index < t.packages[i].os_index, "packages %u, %u", t.packages[i - 1].os_index,
               t.packages[i].os_index);
  }
  for (const auto& node : t.nodes) {
    for (const auto& core : node.cores) FUZZ_CHECK(core.is_subset_of(node.cpus), "a core outside node %u", node.os_index);
  }
  FUZZ_CHECK(!t.online_cpus.intersects(t.offline_cpus), "%s", "CPUs both online and offline");
  if (t.distances) {
    const auto n = t.distances->nodes.size();
    FUZZ_CHECK(t.distances->values.size() == n * n, "%zu distances for %zu nodes", t.distances->values.size(), n);
  }
  return 0;
}
