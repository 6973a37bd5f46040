#pragma once
// Machines and placements for tests that plan threads or replicas: an hwloc
// synthetic topology, and a process confined to some CPUs and memory nodes.

#include <gtest/gtest.h>

#include <string>

#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"

namespace numaserve::testing {

// "pack:2 numa:1 core:4 pu:2": 2 nodes of 4 two-thread cores.
inline Topology synthetic_machine(const std::string& description) {
  auto t = discover_topology(TopologySource::synthetic(description));
  EXPECT_TRUE(t.has_value()) << description;
  return t.value_or(Topology{});
}

inline Placement confined_to(const CpuSet& cpus, const NodeSet& mems) {
  Placement p;
  p.affinity = cpus;
  p.mems_allowed = mems;
  return p;
}

}  // namespace numaserve::testing
