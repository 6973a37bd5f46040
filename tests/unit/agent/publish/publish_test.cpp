#include "publish/nrt.h"

#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "numaserve/common/text_file.h"
#include "publish/files.h"
#include "publish/yaml.h"

#include <sys/stat.h>

namespace numaserve::agent::publish {
namespace {

struct Machine {
  discover::NodeReport report;
  plan::NodePlan plan;
};

Machine machine(const TopologySource& source) {
  auto report = discover::discover_node(discover::DiscoverConfig::of(source));
  EXPECT_TRUE(report.has_value()) << source.describe();
  auto p = plan::plan_node(report->topology, {});
  EXPECT_TRUE(p.has_value()) << source.describe();
  return {*report, *p};
}

class EveryCapture : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryCapture, ZonesAgreeWithTheTopologyAndThePlan) {
  const auto [report, plan] = machine(TopologySource::sysfs(testing::sysfs_root(GetParam()).string()));
  const auto nrt = make_node_resource_topology("worker-7", report, &plan);
  EXPECT_EQ(nrt["metadata"]["name"], "worker-7");
  const auto& t = report.topology;
  ASSERT_EQ(nrt["zones"].size(), t.nodes.size());
  for (std::size_t i = 0; i < t.nodes.size(); ++i) {
    const auto& node = t.nodes[i];
    const auto& zone = nrt["zones"][i];
    EXPECT_EQ(zone["name"], "node-" + std::to_string(node.os_index));
    EXPECT_EQ(zone["type"], "Node");
    if (t.distances) {
      ASSERT_EQ(zone["costs"].size(), t.distances->nodes.size());
      for (const auto& cost : zone["costs"]) {
        const unsigned other = static_cast<unsigned>(std::stoul(cost["name"].get<std::string>().substr(5)));
        EXPECT_EQ(cost["value"], *t.distances->at(node.os_index, other));
      }
    }
    std::map<std::string, nlohmann::json> resources;
    for (const auto& r : zone["resources"]) resources[r["name"]] = r;
    if (node.memory_only()) {
      EXPECT_FALSE(resources.contains("cpu"));
      EXPECT_EQ(resources["memory"]["allocatable"], 0);
    } else {
      EXPECT_EQ(resources["cpu"]["capacity"], node.cpus.count());
      EXPECT_EQ(resources["cpu"]["allocatable"],
                node.cpus.count() - (node.cpus & plan.kubelet.reserved_system_cpus).count());
      EXPECT_LE(resources["memory"]["allocatable"].get<std::uint64_t>(), resources["memory"]["capacity"].get<std::uint64_t>());
    }
    for (const auto& [size, count] : node.hugepages) {
      EXPECT_TRUE(resources.contains("hugepages-" + std::to_string(size >> 10) + "Ki") ||
                  resources.contains("hugepages-" + std::to_string(size >> 20) + "Mi") ||
                  resources.contains("hugepages-" + std::to_string(size >> 30) + "Gi"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Publish, EveryCapture,
                         ::testing::Values("16amd64-8n2c", "32amd64-4s2n4c-cgroup2", "64amd64-4s2n4ca2co",
                                           "fakeheteromemtiers", "offline-cpu0-node0"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return "capture" + std::to_string(param_info.index);
                         });

TEST(Nrt, AvailableSubtractsWhatTheKubeletAssignedAndAttributesComeFromItsConfig) {
  discover::DiscoverConfig config;
  config.source =
      TopologySource::xml((testing::fixtures_dir() / "topologies/xml/32em64t-2n8c2t-pci-normalio.xml").string());
  config.kubelet_config = testing::fixtures_dir() / "kubelet/numa-ready/config.yaml";
  config.kubelet_state_dir = testing::fixtures_dir() / "kubelet/numa-ready";
  auto report = discover::discover_node(config);
  ASSERT_TRUE(report.has_value());
  EXPECT_TRUE(report->warnings.empty()) << ::testing::PrintToString(report->warnings);
  auto p = plan::plan_node(report->topology, {});
  ASSERT_TRUE(p.has_value());
  const auto nrt = make_node_resource_topology("w", *report, &*p);
  ASSERT_EQ(nrt["attributes"].size(), 2u);
  EXPECT_EQ(nrt["attributes"][0]["value"], "single-numa-node");
  EXPECT_EQ(nrt["attributes"][1]["value"], "pod");
  for (const auto& zone : nrt["zones"]) {
    for (const auto& r : zone["resources"]) {
      if (r["name"] == "cpu") {
        EXPECT_EQ(r["allocatable"], 14);
        EXPECT_EQ(r["available"], 4);  // 10 CPUs of each node are held exclusively
      }
      if (r["name"] == "memory") {
        const std::uint64_t assigned = zone["name"] == "node-0" ? 16ull << 30 : 8ull << 30;
        EXPECT_EQ(r["allocatable"], 33233567744ull);  // the Memory Manager's, from its state file
        EXPECT_EQ(r["available"].get<std::uint64_t>(), r["allocatable"].get<std::uint64_t>() - assigned);
      }
    }
  }
}

TEST(Labels, DescribeTheNodeForNodeSelectors) {
  const auto [report, plan] = machine(
      TopologySource::xml((testing::fixtures_dir() / "topologies/xml/32em64t-2n8c2t-pci-normalio.xml").string()));
  const auto labels = make_node_labels(report, &plan);
  EXPECT_EQ(labels.at("numaserve.io/numa-nodes"), "2");
  EXPECT_EQ(labels.at("numaserve.io/cpus-per-numa-node"), "16");
  EXPECT_EQ(labels.at("numaserve.io/smt"), "true");
  EXPECT_EQ(labels.at("numaserve.io/replica-cpus"), "14");
  for (const auto& [key, value] : labels) {
    EXPECT_LE(value.size(), 63u) << key;
    EXPECT_EQ(value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."),
              std::string::npos)
        << key << "=" << value;
  }
}

class HintFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("numaserve-hints-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;  // the directory may not exist
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

TEST_F(HintFiles, WrittenWholeAndOnlyWhenChanged) {
  auto first = write_hints(dir_, {{"plan.json", "{}\n"}, {"topology.json", "{\"a\":1}\n"}});
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_EQ(first->size(), 2u);
  EXPECT_EQ(read_text_file(dir_ / "topology.json").value(), "{\"a\":1}\n");
  const auto mtime = std::filesystem::last_write_time(dir_ / "plan.json");

  auto second = write_hints(dir_, {{"plan.json", "{}\n"}, {"topology.json", "{\"a\":2}\n"}});
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second, std::vector<std::string>{"topology.json"});
  EXPECT_EQ(std::filesystem::last_write_time(dir_ / "plan.json"), mtime);
  // No temporary files left behind, and readable by others.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 2);
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "plan.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(HintFiles, ReadOnlyDirectoryIsAClearError) {
  if (::geteuid() == 0) {
    // root ignores directory permissions; a read-only mount is what a node
    // really shows, and /proc is one every machine has.
    auto e = write_hints("/proc/numaserve-hints", {{"plan.json", "{}"}});
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.error().message.find("/proc/numaserve-hints"), std::string::npos) << e.error().message;
    return;
  }
  std::filesystem::create_directories(dir_);
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  auto e = write_hints(dir_, {{"plan.json", "{}"}});
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find(dir_.string()), std::string::npos) << e.error().message;
}

TEST(Yaml, QuotesStringsAndKeepsNumbers) {
  const std::string yaml = to_yaml({{"a", "true"}, {"b", 10}, {"c", nlohmann::json::array({"0-3", false})}});
  EXPECT_EQ(yaml, "a: \"true\"\nb: 10\nc:\n  - \"0-3\"\n  - false\n");
}

}  // namespace
}  // namespace numaserve::agent::publish
