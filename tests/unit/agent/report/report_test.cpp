#include "report/report.h"

#include <gtest/gtest.h>

namespace numaserve::agent::report {
namespace {

TEST(Report, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512ull << 20), "512 MiB");
  EXPECT_EQ(format_bytes(64ull << 30), "64 GiB");
  EXPECT_EQ(format_bytes(3005392ull * 1024), "2.9 GiB");
}

TEST(Report, NamesNodesCoresMemoryAndDistances) {
  auto topology = discover_topology(TopologySource::synthetic("pack:2 numa:1(memory=32GiB) core:2 pu:2"));
  ASSERT_TRUE(topology.has_value());
  discover::NodeReport report;
  report.topology = *topology;
  report.warnings = {"something is off"};
  const std::string text = render_text(report);
  EXPECT_NE(text.find("2 packages, 2 NUMA nodes (2 with CPUs), 4 cores, 8 online CPUs, 2 thread(s) per core"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("NUMA node 1: CPUs 4-7 (2 cores), 32 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: something is off"), std::string::npos) << text;
}

TEST(Report, ShowsPlacementCgroupAndKernelSettings) {
  auto topology = discover_topology(TopologySource::synthetic("numa:2 core:2 pu:1"));
  ASSERT_TRUE(topology.has_value());
  Placement placement;
  placement.affinity = CpuSet::range(0, 3);
  placement.mems_allowed = NodeSet{0, 1};
  placement.cgroup = CgroupPlacement{2, "/pod", "/sys/fs/cgroup/pod", CpuSet{2, 3}, NodeSet{1}, 2.0};
  discover::NodeReport report;
  report.topology = *topology;
  report.placement = placement;
  report.kernel = KernelSettings{1, "always", "madvise", {}, {}};
  const std::string text = render_text(report);
  EXPECT_NE(text.find("This process: CPUs 2-3, memory nodes 1"), std::string::npos) << text;
  EXPECT_NE(text.find("cgroup v2 /pod cpus 2-3 mems 1, CPU limit 2"), std::string::npos) << text;
  EXPECT_NE(text.find("Kernel: numa_balancing 1, transparent hugepages always, isolated CPUs none"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace numaserve::agent::report
