#include "numaserve/common/topology.h"

#include <gtest/gtest.h>

#include <fstream>

#include "fixture_paths.h"
#include "golden.h"
#include "lstopo_output.h"
#include "numaserve/common/topology_json.h"

namespace numaserve {
namespace {

using testing::fixtures_dir;
using testing::sysfs_root;

const std::vector<std::string> kSysfsFixtures = {
    "16amd64-8n2c", "32amd64-4s2n4c-cgroup2", "64amd64-4s2n4ca2co", "fakeheteromemtiers",
    "offline-cpu0-node0"};

const std::vector<std::string> kXmlFixtures = {
    "16amd64-4distances",      "16amd64-8n2c-cpusets", "16em64t-4s2c2t-offlines",
    "16em64t-4s2c2t",          "24em64t-2n6c2t-pci",   "32em64t-2n8c2t-pci-normalio",
    "64intel64-fakeKNL-SNC4-hybrid"};

// gtest names allow only [A-Za-z0-9_].
std::string test_name(const ::testing::TestParamInfo<std::string>& param_info) {
  std::string name = param_info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

Topology discover_or_fail(const TopologySource& source) {
  auto topology = discover_topology(source);
  EXPECT_TRUE(topology.has_value()) << source.describe() << ": " << topology.error().message;
  return topology.value_or(Topology{});
}

Topology from_sysfs(const std::string& name) {
  return discover_or_fail(TopologySource::sysfs(sysfs_root(name).string()));
}

Topology from_xml(const std::string& name) {
  return discover_or_fail(TopologySource::xml((fixtures_dir() / "topologies/xml" / (name + ".xml")).string()));
}

// --- Agreement with hwloc 2.9.3's own expected output -----------------------

class SysfsCapture : public ::testing::TestWithParam<std::string> {};

// lstopo printed the default (restricted) view: only what the captured
// process's cpuset allowed. Our model keeps the whole machine and records
// what was allowed, so the comparison restricts it the same way.
TEST_P(SysfsCapture, AgreesWithHwlocExpectedOutput) {
  const std::string name = GetParam();
  auto expected = testing::parse_lstopo_output(fixtures_dir() / "topologies/sysfs" / (name + ".output"));
  ASSERT_TRUE(expected.has_value()) << expected.error().message;
  ASSERT_FALSE(expected->nodes.empty());
  const Topology topology = from_sysfs(name);

  NodeSet expected_ids;
  for (const auto& [id, node] : expected->nodes) expected_ids.insert(id);
  EXPECT_EQ((topology.node_ids() & topology.allowed_mems).to_list(), expected_ids.to_list());

  for (const auto& [id, want] : expected->nodes) {
    const NumaNode* node = topology.node(id);
    ASSERT_NE(node, nullptr) << "node " << id;
    EXPECT_EQ((node->local_cpus & topology.allowed_cpus).to_list(), want.cpus.to_list()) << "node " << id;
    EXPECT_EQ(node->memory_bytes, want.local_kb * 1024) << "node " << id;
  }

  // hwloc keeps no matrix for a single node; then neither do we.
  ASSERT_EQ(topology.distances.has_value(), !expected->latency.empty());
  for (const auto& [pair, value] : expected->latency) {
    EXPECT_EQ(topology.distances->at(pair.first, pair.second), value)
        << "distance " << pair.first << " -> " << pair.second;
  }
  if (!expected->latency.empty()) {
    EXPECT_EQ(expected->latency.size(), expected->nodes.size() * expected->nodes.size());
  }

  const CpuSet hidden = topology.offline_cpus | (topology.online_cpus - topology.allowed_cpus);
  EXPECT_EQ(hidden.to_list(), expected->not_represented.to_list());
}

INSTANTIATE_TEST_SUITE_P(HwlocTestSuite, SysfsCapture, ::testing::ValuesIn(kSysfsFixtures),
                         test_name);

// --- Golden files: the whole model, reviewed as a diff ----------------------

void expect_matches_golden(const Topology& topology, const std::string& name) {
  nlohmann::json json = topology;
  json.erase("source");  // holds a build-tree path
  testing::expect_matches_golden(json.dump(2) + "\n",
                                 fixtures_dir() / "topologies/golden" / (name + ".json"));
}

TEST_P(SysfsCapture, MatchesGolden) { expect_matches_golden(from_sysfs(GetParam()), GetParam()); }

class XmlExport : public ::testing::TestWithParam<std::string> {};

TEST_P(XmlExport, MatchesGolden) { expect_matches_golden(from_xml(GetParam()), GetParam()); }

INSTANTIATE_TEST_SUITE_P(HwlocTestSuite, XmlExport, ::testing::ValuesIn(kXmlFixtures),
                         test_name);

// --- Behaviour users rely on, machine by machine -----------------------------

TEST(Topology, OfflineNodeZeroLeavesItsOnlineCpusWithoutANode) {
  const Topology t = from_sysfs("offline-cpu0-node0");
  EXPECT_EQ(t.node_ids().to_list(), "1");
  EXPECT_EQ(t.offline_nodes.to_list(), "0");
  EXPECT_EQ(t.offline_cpus.to_list(), "0-3,21-23");
  EXPECT_EQ(t.node(1)->cpus.to_list(), "5,7,9,11,13,15,17,19");
  EXPECT_EQ(t.cpus_without_node.to_list(), "4,6,8,10,12,14,16,18,20");
  ASSERT_EQ(t.packages.size(), 2u);
  EXPECT_TRUE(t.packages[0].nodes.empty());
}

TEST(Topology, MemoryOnlyNodesHaveNoCpusButKeepTheirLocality) {
  const Topology t = from_sysfs("fakeheteromemtiers");
  EXPECT_EQ(t.node_ids().to_list(), "0-2,4,6,8-9");  // sparse ids
  EXPECT_EQ(t.nodes_with_cpus().to_list(), "0-2");
  ASSERT_EQ(t.nodes.size(), 7u);
  const NumaNode* hbm = t.node(4);
  ASSERT_NE(hbm, nullptr);
  EXPECT_TRUE(hbm->memory_only());
  EXPECT_EQ(hbm->kind, "HBM");
  EXPECT_EQ(hbm->local_cpus.to_list(), "2-3");
  EXPECT_EQ(hbm->memory_bytes, 524288ull * 1024);
  EXPECT_TRUE(hbm->cores.empty());
  // Node 2 is HBM too, yet the kernel gives it CPUs 4-5: the tier does not
  // decide, the kernel's cpulist does.
  EXPECT_EQ(t.node(2)->kind, "HBM");
  EXPECT_EQ(t.node(2)->cpus.to_list(), "4-5");
  EXPECT_EQ(t.node(8)->local_cpus.to_list(), "0-1");
  EXPECT_TRUE(t.node(8)->memory_only());
  EXPECT_EQ(t.node(2)->hugepages.count(2u << 20), 1u);
}

TEST(Topology, CgroupRestrictedCaptureStillDescribesTheWholeMachine) {
  const Topology t = from_sysfs("32amd64-4s2n4c-cgroup2");
  ASSERT_EQ(t.nodes.size(), 8u);
  EXPECT_EQ(t.online_cpus.to_list(), "0-31");
  EXPECT_EQ(t.allowed_cpus.to_list(), "0-5");
  EXPECT_EQ(t.allowed_mems.to_list(), "0-5");
  EXPECT_EQ(t.node(7)->cpus.to_list(), "28-31");
}

TEST(Topology, EightNodesEachWithTwoCores) {
  const Topology t = from_sysfs("16amd64-8n2c");
  ASSERT_EQ(t.nodes.size(), 8u);
  for (const auto& node : t.nodes) {
    EXPECT_EQ(node.cpus, CpuSet::range(2 * node.os_index, 2 * node.os_index + 1));
    EXPECT_EQ(node.cores.size(), 2u);
  }
  EXPECT_EQ(t.distances->at(0, 0), 10u);
  EXPECT_EQ(t.distances->at(3, 5), 20u);
}

TEST(Topology, SmtSiblingsFormOneCore) {
  const Topology t = from_xml("32em64t-2n8c2t-pci-normalio");
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.threads_per_core(), 2u);
  EXPECT_EQ(t.node(0)->cores.size(), 8u);
  EXPECT_EQ(t.node(0)->cores.front().to_list(), "0,16");
  EXPECT_EQ(t.core_count(), 16u);
}

TEST(Topology, OfflineSmtSiblingsLeaveSingleThreadCores) {
  const Topology t = from_xml("16em64t-4s2c2t-offlines");
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.offline_cpus.to_list(), "2,5,7-11,13-14");
  EXPECT_EQ(t.online_cpus.count(), 7u);
  EXPECT_EQ(t.threads_per_core(), 2u);  // one core still has both threads
  std::size_t single = 0;
  for (const auto& core : t.node(0)->cores) single += core.count() == 1;
  EXPECT_GT(single, 0u);
}

TEST(Topology, KnlMcdramNodesAreMemoryOnly) {
  const Topology t = from_xml("64intel64-fakeKNL-SNC4-hybrid");
  ASSERT_EQ(t.nodes.size(), 8u);
  EXPECT_EQ(t.nodes_with_cpus().to_list(), "0-3");
  for (unsigned id = 4; id <= 7; ++id) {
    EXPECT_TRUE(t.node(id)->memory_only()) << id;
    EXPECT_EQ(t.node(id)->kind, "MCDRAM");
    EXPECT_EQ(t.node(id)->local_cpus.count(), 16u);
  }
  EXPECT_EQ(t.threads_per_core(), 4u);
}

TEST(Topology, PrefersTheKernelsLatencyMatrixAmongSeveral) {
  const Topology t = from_xml("16amd64-4distances");
  ASSERT_TRUE(t.distances.has_value());
  EXPECT_EQ(t.distances->nodes.size(), 8u);
  EXPECT_EQ(t.distances->at(0, 0), 10u);
  EXPECT_EQ(t.distances->at(0, 1), 20u);
}

TEST(Topology, SyntheticDescription) {
  const Topology t =
      discover_or_fail(TopologySource::synthetic("pack:2 numa:1(memory=64GiB) core:4 pu:2"));
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.packages.size(), 2u);
  EXPECT_EQ(t.threads_per_core(), 2u);
  EXPECT_EQ(t.core_count(), 8u);
  for (const auto& node : t.nodes) {
    EXPECT_EQ(node.memory_bytes, 64ull << 30);
    EXPECT_EQ(node.cpus.count(), 8u);
  }
  EXPECT_FALSE(t.node(0)->cpus.intersects(t.node(1)->cpus));
}

TEST(Topology, LiveSystemHasTheCpusThisProcessRunsOn) {
  const Topology t = discover_or_fail(TopologySource::live());
  ASSERT_FALSE(t.nodes.empty());
  EXPECT_FALSE(t.allowed_cpus.empty());
  EXPECT_TRUE(t.allowed_cpus.is_subset_of(t.online_cpus));
  CpuSet all;
  for (const auto& node : t.nodes) all |= node.cpus;
  EXPECT_EQ(all | t.cpus_without_node, t.online_cpus);
}

// --- Errors name the source ---------------------------------------------------

TEST(TopologyErrors, MissingXmlFile) {
  auto t = discover_topology(TopologySource::xml("/nonexistent/machine.xml"));
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, Error::Code::kNotFound);
  EXPECT_NE(t.error().message.find("/nonexistent/machine.xml"), std::string::npos) << t.error().message;
}

TEST(TopologyErrors, NotAnXmlTopology) {
  const auto path = std::filesystem::temp_directory_path() / "numaserve-not-a-topology.xml";
  std::ofstream(path) << "<html>this is not hwloc</html>\n";
  auto t = discover_topology(TopologySource::xml(path.string()));
  std::filesystem::remove(path);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find(path.string()), std::string::npos) << t.error().message;
}

TEST(TopologyErrors, UnreadableXml) {
  // A directory opens but cannot be read as a file.
  auto t = discover_topology(TopologySource::xml(std::filesystem::temp_directory_path().string()));
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find(std::filesystem::temp_directory_path().string()), std::string::npos);
}

TEST(TopologyErrors, BadSyntheticDescription) {
  auto t = discover_topology(TopologySource::synthetic("pack:two"));
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(t.error().message.find("pack:two"), std::string::npos);
}

TEST(TopologyErrors, SysfsRootWithoutSys) {
  auto t = discover_topology(TopologySource::sysfs("/nonexistent-root"));
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, Error::Code::kNotFound);
  EXPECT_NE(t.error().message.find("/nonexistent-root"), std::string::npos);
}

}  // namespace
}  // namespace numaserve
