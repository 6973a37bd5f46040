#include "discover/discover.h"

#include <gtest/gtest.h>

#include <fstream>

#include "fixture_paths.h"

namespace numaserve::agent::discover {
namespace {

TEST(Discover, CapturedTreeGivesTopologyAndKernelButNoPlacement) {
  auto report = discover_node(DiscoverConfig::of(TopologySource::sysfs(testing::sysfs_root("16amd64-8n2c").string())));
  ASSERT_TRUE(report.has_value()) << report.error().message;
  EXPECT_EQ(report->topology.nodes.size(), 8u);
  EXPECT_FALSE(report->placement.has_value());
  ASSERT_TRUE(report->kernel.has_value());
  EXPECT_TRUE(report->warnings.empty()) << ::testing::PrintToString(report->warnings);
}

TEST(Discover, BrokenKernelSettingIsAWarningAndDiscoveryGoesOn) {
  // A copy of a real capture with a malformed numa_balancing added.
  const auto root = std::filesystem::temp_directory_path() / "numaserve-discover-test";
  std::filesystem::remove_all(root);
  std::filesystem::copy(testing::sysfs_root("16amd64-8n2c"), root, std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  std::filesystem::create_directories(root / "proc/sys/kernel");
  std::ofstream(root / "proc/sys/kernel/numa_balancing") << "yes\n";
  auto report = discover_node(DiscoverConfig::of(TopologySource::sysfs(root.string())));
  std::filesystem::remove_all(root);
  ASSERT_TRUE(report.has_value()) << report.error().message;
  EXPECT_EQ(report->topology.nodes.size(), 8u);
  EXPECT_FALSE(report->kernel.has_value());
  ASSERT_EQ(report->warnings.size(), 1u);
  EXPECT_NE(report->warnings[0].find("numa_balancing: want a number, got 'yes'"), std::string::npos)
      << report->warnings[0];
}

// A synthetic machine with the kubelet files of one fixture folder.
DiscoverConfig with_kubelet_files(const std::string& folder) {
  DiscoverConfig config = DiscoverConfig::of(TopologySource::synthetic("pack:2 numa:1(memory=32GiB) core:8 pu:2"));
  config.kubelet_config = testing::fixtures_dir() / "kubelet" / folder / "config.yaml";
  config.kubelet_state_dir = testing::fixtures_dir() / "kubelet" / folder;
  return config;
}

TEST(Discover, KubeletFilesAreReadAndCheckedAgainstTheAdvice) {
  auto report = discover_node(with_kubelet_files("defaults"));
  ASSERT_TRUE(report.has_value()) << report.error().message;
  ASSERT_TRUE(report->kubelet_config.has_value());
  ASSERT_TRUE(report->cpu_manager_state.has_value());
  const std::string all = ::testing::PrintToString(report->warnings);
  EXPECT_NE(all.find("unknown fields: cpuManagerPolicyy (line 8)"), std::string::npos) << all;
  EXPECT_NE(all.find("cpuManagerPolicy is 'none'"), std::string::npos) << all;
  EXPECT_NE(all.find("topologyManagerPolicy is 'none'"), std::string::npos) << all;
  EXPECT_NE(all.find("memory_manager_state"), std::string::npos) << all;  // absent file
}

TEST(Discover, BrokenKubeletFilesAreWarningsAndDiscoveryGoesOn) {
  auto report = discover_node(with_kubelet_files("broken"));
  ASSERT_TRUE(report.has_value()) << report.error().message;
  EXPECT_EQ(report->topology.nodes.size(), 2u);
  EXPECT_FALSE(report->kubelet_config.has_value());
  EXPECT_FALSE(report->cpu_manager_state.has_value());
  EXPECT_FALSE(report->memory_manager_state.has_value());
  EXPECT_EQ(report->warnings.size(), 3u) << ::testing::PrintToString(report->warnings);
}

// The state files alone: a pod whose directory the kubelet has removed no
// longer holds memory, though the Memory Manager's file still says so; the
// memory allocatable is the Memory Manager's own figure.
TEST(Discover, StateFilesLeaveOutEndedPods) {
  auto report = discover_node(with_kubelet_files("ended-pod"));
  ASSERT_TRUE(report.has_value()) << report.error().message;
  ASSERT_TRUE(report->allocations.has_value());
  EXPECT_EQ(report->allocations->exclusive_cpus, CpuSet{1});
  EXPECT_EQ(report->allocations->assigned.at(0).at("memory"), 1ull << 30);
  EXPECT_EQ(report->allocations->allocatable_memory.at(0), 25171337216ull);
}

TEST(Discover, LiveNodeIncludesTheAgentsOwnPlacement) {
  auto report = discover_node(DiscoverConfig::of(TopologySource::live()));
  ASSERT_TRUE(report.has_value()) << report.error().message;
  ASSERT_TRUE(report->placement.has_value());
  EXPECT_TRUE(report->placement->cpus().is_subset_of(report->topology.online_cpus));
  const nlohmann::json json = *report;
  EXPECT_EQ(json["placement"]["cpus"], report->placement->cpus().to_list());
}

TEST(Discover, UnreadableMachineIsTheOneFatalError) {
  auto report = discover_node(DiscoverConfig::of(TopologySource::xml("/no/such/machine.xml")));
  ASSERT_FALSE(report.has_value());
  EXPECT_NE(report.error().message.find("/no/such/machine.xml"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::agent::discover
