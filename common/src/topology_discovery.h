#pragma once
// Private to numaserve::common: the two ways discover_topology() reads a
// machine through hwloc. hwloc's header stays in hwloc_discovery.cpp.

#include "numaserve/common/topology.h"

namespace numaserve {

// In this process (hwloc_discovery.cpp): the live machine, a sysfs root or
// a synthetic description, which hwloc reads safely.
Result<Topology> discover_with_hwloc(const TopologySource& source);

// In a child process with a time and memory cap (topology_child.cpp): an
// hwloc XML export, which hwloc's parser trusts too far to read here.
Result<Topology> discover_in_child(const TopologySource& source);

}  // namespace numaserve
