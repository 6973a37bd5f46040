// The machine model's own queries, and the one entry point to discovery.
#include "numaserve/common/topology.h"

#include <algorithm>

#include "topology_discovery.h"

namespace numaserve {

std::string TopologySource::describe() const {
  switch (kind) {
    case Kind::kLive: return "live system";
    case Kind::kXml: return "hwloc XML " + value;
    case Kind::kSysfs: return "sysfs root " + value;
    case Kind::kSynthetic: return "synthetic '" + value + "'";
  }
  return "unknown source";
}

std::optional<std::uint32_t> DistanceMatrix::at(unsigned from_node, unsigned to_node) const {
  const auto from = std::find(nodes.begin(), nodes.end(), from_node);
  const auto to = std::find(nodes.begin(), nodes.end(), to_node);
  if (from == nodes.end() || to == nodes.end()) return std::nullopt;
  return values[static_cast<std::size_t>(from - nodes.begin()) * nodes.size() +
                static_cast<std::size_t>(to - nodes.begin())];
}

const NumaNode* Topology::node(unsigned os_index) const {
  auto it = std::find_if(nodes.begin(), nodes.end(),
                         [&](const NumaNode& n) { return n.os_index == os_index; });
  return it == nodes.end() ? nullptr : &*it;
}

NodeSet Topology::node_ids() const {
  NodeSet out;
  for (const auto& n : nodes) out.insert(n.os_index);
  return out;
}

NodeSet Topology::nodes_with_cpus() const {
  NodeSet out;
  for (const auto& n : nodes) {
    if (!n.memory_only()) out.insert(n.os_index);
  }
  return out;
}

std::uint64_t NumaNode::ordinary_memory() const {
  std::uint64_t pools = 0;
  for (const auto& [size, count] : hugepages) pools += size * count;
  return memory_bytes - std::min(memory_bytes, pools);
}

std::size_t Topology::core_count() const {
  std::size_t n = 0;
  for (const auto& node : nodes) n += node.cores.size();
  return n;
}

unsigned Topology::threads_per_core() const {
  std::size_t most = 1;
  for (const auto& node : nodes) {
    for (const auto& core : node.cores) most = std::max(most, core.count());
  }
  return static_cast<unsigned>(most);
}

Result<Topology> discover_topology(const TopologySource& source) {
  if (source.kind == TopologySource::Kind::kXml) return discover_in_child(source);
  return discover_with_hwloc(source);
}

}  // namespace numaserve
