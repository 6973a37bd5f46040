#include "plan/plan.h"

#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "golden.h"
#include "plan/plan_output.h"

namespace numaserve {
// gtest names parameterized cases by this; the default prints raw bytes.
void PrintTo(const TopologySource& source, std::ostream* out) { *out << source.describe(); }
}  // namespace numaserve

namespace numaserve::agent::plan {
namespace {

using testing::fixtures_dir;

// Every fixture machine that can host a replica. One cannot and gets its own
// test: 16em64t-4s2c2t's exports record no memory sizes. 16amd64-8n2c-cpusets
// (an offline CPU leaves NUMA node 2 one core) plans with a note.
const std::vector<TopologySource> kMachines = {
    TopologySource::sysfs(testing::sysfs_root("16amd64-8n2c").string()),
    TopologySource::sysfs(testing::sysfs_root("32amd64-4s2n4c-cgroup2").string()),
    TopologySource::sysfs(testing::sysfs_root("64amd64-4s2n4ca2co").string()),
    TopologySource::sysfs(testing::sysfs_root("fakeheteromemtiers").string()),
    TopologySource::sysfs(testing::sysfs_root("offline-cpu0-node0").string()),
    TopologySource::xml((fixtures_dir() / "topologies/xml/16amd64-4distances.xml").string()),
    TopologySource::xml((fixtures_dir() / "topologies/xml/16amd64-8n2c-cpusets.xml").string()),
    TopologySource::xml((fixtures_dir() / "topologies/xml/24em64t-2n6c2t-pci.xml").string()),
    TopologySource::xml((fixtures_dir() / "topologies/xml/32em64t-2n8c2t-pci-normalio.xml").string()),
    TopologySource::xml((fixtures_dir() / "topologies/xml/64intel64-fakeKNL-SNC4-hybrid.xml").string()),
    TopologySource::synthetic("pack:4 numa:4(memory=32GiB) core:4 pu:2"),  // 16 nodes
    TopologySource::synthetic("pack:2 numa:1(memory=256GiB) core:32 pu:2"),
};

// PlanConfig with one field changed (designated initializers would trip
// GCC 12's -Wmissing-field-initializers).
template <typename Change>
PlanConfig config_with(Change change) {
  PlanConfig config;
  change(config);
  return config;
}

Topology load(const TopologySource& source) {
  auto t = discover_topology(source);
  EXPECT_TRUE(t.has_value()) << source.describe() << ": " << t.error().message;
  return t.value_or(Topology{});
}

NodePlan plan_or_fail(const Topology& t, const PlanConfig& config = {}) {
  auto p = plan_node(t, config);
  EXPECT_TRUE(p.has_value()) << t.source << ": " << p.error().message;
  return p.value_or(NodePlan{});
}

class EveryMachine : public ::testing::TestWithParam<TopologySource> {};

TEST_P(EveryMachine, ReservedMemorySumsExactlyToWhatTheKubeletChecks) {
  for (const PlanConfig& config : {PlanConfig{}, config_with([](PlanConfig& c) { c.kube_reserved_memory = 300'000'001; })}) {
    const NodePlan p = plan_or_fail(load(GetParam()), config);
    std::uint64_t sum = 0;
    for (const auto& [node, bytes] : p.kubelet.reserved_memory) sum += bytes;
    EXPECT_EQ(sum, config.kube_reserved_memory + config.system_reserved_memory + config.eviction_hard_memory);
  }
}

TEST_P(EveryMachine, ReservedCpusAreWholeCoresSpreadOverEveryNode) {
  const Topology t = load(GetParam());
  for (unsigned per_node : {1u, 2u}) {
    auto planned = plan_node(t, config_with([&](PlanConfig& c) { c.reserved_cores_per_node = per_node; }));
    if (!planned) {  // only a machine where no node holds a replica may fail
      EXPECT_NE(planned.error().message.find("no NUMA node can hold a replica"), std::string::npos)
          << planned.error().message;
      continue;
    }
    const NodePlan& p = *planned;
    for (const auto& node : t.nodes) {
      unsigned reserved_cores = 0;
      for (const auto& core : node.cores) {
        const CpuSet taken = core & p.kubelet.reserved_system_cpus;
        EXPECT_TRUE(taken.empty() || taken == core) << "core " << core << " split on node " << node.os_index;
        reserved_cores += taken.empty() ? 0 : 1;
      }
      // A node with no more cores than asked gives all it has, still whole.
      const unsigned expected =
          node.memory_only() ? 0 : std::min<unsigned>(per_node, static_cast<unsigned>(node.cores.size()));
      EXPECT_EQ(reserved_cores, expected) << "node " << node.os_index;
    }
  }
}

TEST_P(EveryMachine, EveryReplicaFitsOneNode) {
  const Topology t = load(GetParam());
  for (unsigned k : {1u, 2u}) {
    auto p = plan_node(t, config_with([&](PlanConfig& c) { c.replicas_per_numa_node = k; }));
    if (!p) {  // only a machine where no node holds k replicas may fail
      EXPECT_NE(p.error().message.find("no NUMA node can hold a replica"), std::string::npos) << p.error().message;
      continue;
    }
    ASSERT_GT(p->pod.cpus, 0u);
    ASSERT_GT(p->pod.memory_bytes, 0u);
    unsigned slots = 0;
    for (const auto& room : p->nodes) {
      EXPECT_FALSE(room.allocatable_cpus.intersects(p->kubelet.reserved_system_cpus));
      slots += room.replicas;
      if (room.replicas == 0) {  // named in the notes
        const std::string named = "NUMA node " + std::to_string(room.node) + " gets no replica";
        EXPECT_TRUE(std::any_of(p->notes.begin(), p->notes.end(),
                                [&](const std::string& n) { return n.starts_with(named); }))
            << named << " in " << ::testing::PrintToString(p->notes);
        continue;
      }
      EXPECT_EQ(room.replicas, k);
      EXPECT_LE(p->pod.cpus * k, room.allocatable_cpus.count()) << "node " << room.node;
      EXPECT_LE(p->pod.memory_bytes * k, room.allocatable_memory) << "node " << room.node;
    }
    EXPECT_EQ(p->pod.replicas_per_machine, slots);
    EXPECT_GT(slots, 0u);
  }
}

TEST_P(EveryMachine, SmtMachinesNeverSplitASiblingPair) {
  const Topology t = load(GetParam());
  const NodePlan p = plan_or_fail(t);
  EXPECT_EQ(p.kubelet.full_pcpus_only, t.threads_per_core() > 1);
  EXPECT_EQ(p.pod.cpus % t.threads_per_core(), 0u);
}

TEST_P(EveryMachine, MoreThanEightNodesNeedMaxAllowableNumaNodes) {
  const Topology t = load(GetParam());
  const NodePlan p = plan_or_fail(t);
  if (t.nodes.size() > 8) {
    EXPECT_EQ(p.kubelet.max_allowable_numa_nodes, t.nodes.size());
    EXPECT_NE(kubelet_config_yaml(p).find("max-allowable-numa-nodes: \"" + std::to_string(t.nodes.size()) + "\""),
              std::string::npos);
  } else {
    EXPECT_FALSE(p.kubelet.max_allowable_numa_nodes.has_value());
  }
}

TEST_P(EveryMachine, MemoryOnlyNodesGetNoReplica) {
  const Topology t = load(GetParam());
  const NodePlan p = plan_or_fail(t);
  EXPECT_EQ(p.nodes.size(), t.nodes_with_cpus().count());
  for (const auto& room : p.nodes) EXPECT_FALSE(t.node(room.node)->memory_only());
  for (const auto& [node, bytes] : p.kubelet.reserved_memory) EXPECT_FALSE(t.node(node)->memory_only());
}

INSTANTIATE_TEST_SUITE_P(NodePlan, EveryMachine, ::testing::ValuesIn(kMachines),
                         [](const ::testing::TestParamInfo<TopologySource>& param_info) {
                           return "machine" + std::to_string(param_info.index);
                         });

// --- Golden outputs for two machines ---------------------------------------

void expect_outputs_match_golden(const std::string& xml, const std::string& name) {
  const NodePlan p = plan_or_fail(load(TopologySource::xml((fixtures_dir() / "topologies/xml" / xml).string())));
  const auto dir = fixtures_dir() / "plan";
  testing::expect_matches_golden(kubelet_config_yaml(p), dir / (name + ".kubelet-config.yaml"));
  testing::expect_matches_golden(helm_values_yaml(p), dir / (name + ".helm-values.yaml"));
  testing::expect_matches_golden(nlohmann::json(p).dump(2) + "\n", dir / (name + ".plan.json"));
}

TEST(PlanGolden, TwoSocketXeonWithSmt) {
  expect_outputs_match_golden("32em64t-2n8c2t-pci-normalio.xml", "32em64t-2n8c2t-pci-normalio");
}

TEST(PlanGolden, EightNodeOpteronsWithUnequalMemory) {
  expect_outputs_match_golden("16amd64-4distances.xml", "16amd64-4distances");
  const NodePlan p = plan_or_fail(load(TopologySource::sysfs(testing::sysfs_root("64amd64-4s2n4ca2co").string())));
  testing::expect_matches_golden(kubelet_config_yaml(p), fixtures_dir() / "plan/64amd64-4s2n4ca2co.kubelet-config.yaml");
}

// --- Behaviour ---------------------------------------------------------------

TEST(NodePlan, UnequalNodesAreSizedToTheSmallestAndExplained) {
  const NodePlan p = plan_or_fail(load(TopologySource::sysfs(testing::sysfs_root("64amd64-4s2n4ca2co").string())));
  // Node 5 has 8 GiB, the others 16 GiB: the reservation is taken from the
  // large nodes, so the small one keeps all it has.
  EXPECT_EQ(p.kubelet.reserved_memory.at(5), 0u);
  const auto& small = *std::find_if(p.nodes.begin(), p.nodes.end(), [](const NodeRoom& r) { return r.node == 5; });
  const double share = static_cast<double>(small.allocatable_memory) * 0.9;
  EXPECT_EQ(p.pod.memory_bytes, static_cast<std::uint64_t>(share) / (1 << 20) * (1 << 20));
  bool explained = false;
  for (const auto& note : p.notes) explained |= note.find("unequal memory: node 5") != std::string::npos;
  EXPECT_TRUE(explained) << ::testing::PrintToString(p.notes);
}

TEST(NodePlan, OfflineCpusAndOrphanCpusAreExplained) {
  const NodePlan p = plan_or_fail(load(TopologySource::sysfs(testing::sysfs_root("offline-cpu0-node0").string())));
  ASSERT_EQ(p.nodes.size(), 1u);
  EXPECT_EQ(p.nodes[0].node, 1u);
  EXPECT_EQ(p.pod.cpus, 7u);
  EXPECT_EQ(p.notes.size(), 2u) << ::testing::PrintToString(p.notes);
}

TEST(NodePlan, ExplicitReservationsThatDoNotAddUpAreRefused) {
  const Topology t = load(TopologySource::synthetic("pack:2 numa:1(memory=64GiB) core:8 pu:1"));
  PlanConfig config;
  config.reserved_memory = {{0, 1ull << 30}, {1, 1ull << 30}};  // 2Gi, but 2Gi + 100Mi are needed
  auto p = plan_node(t, config);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("reservedMemory sums to 2Gi but kube-reserved + system-reserved + "
                                   "eviction-hard memory is 2148Mi"),
            std::string::npos)
      << p.error().message;
  config.reserved_memory = {{0, (1ull << 30) + (100ull << 20)}, {1, 1ull << 30}};
  EXPECT_TRUE(plan_node(t, config).has_value());
  config.reserved_memory = {{7, 2148ull << 20}};
  EXPECT_NE(plan_node(t, config).error().message.find("NUMA node 7"), std::string::npos);
}

TEST(NodePlan, AMachineWhereNoNodeHoldsAReplicaIsAClearError) {
  const Topology t = load(TopologySource::synthetic("pack:2 numa:1(memory=8GiB) core:2 pu:2"));
  auto p = plan_node(t, config_with([](PlanConfig& c) { c.reserved_cores_per_node = 2; }));
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().message,
            "no NUMA node can hold a replica (node 0: it has 2 core(s) and reserving 2 per node leaves none; "
            "node 1: it has 2 core(s) and reserving 2 per node leaves none)");
  EXPECT_EQ(p.error().field, "reserved_cores_per_node");
}

TEST(NodePlan, ASingleCoreNodeGivesItsCoreToTheSystemAndHoldsNoReplica) {
  // Offline CPUs leave NUMA nodes 2 and 3 of this machine one core each.
  const Topology t = load(TopologySource::xml((fixtures_dir() / "topologies/xml/16amd64-8n2c-cpusets.xml").string()));
  const NodePlan p = plan_or_fail(t);
  const NodeRoom* two = p.room(2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->replicas, 0u);
  EXPECT_EQ(two->reserved_cpus, t.node(2)->cpus);
  EXPECT_TRUE(two->allocatable_cpus.empty());
  unsigned multi_core_nodes = 0;
  for (const auto& node : t.nodes) multi_core_nodes += node.cores.size() > 1 ? 1 : 0;
  EXPECT_EQ(p.pod.replicas_per_machine, multi_core_nodes);
  EXPECT_EQ(p.notes.front(), "NUMA node 2 gets no replica: it has 1 core(s) and reserving 1 per node leaves none");
  std::uint64_t reserved = 0;
  for (const auto& [node, bytes] : p.kubelet.reserved_memory) reserved += bytes;
  const PlanConfig defaults;
  EXPECT_EQ(reserved, defaults.kube_reserved_memory + defaults.system_reserved_memory + defaults.eviction_hard_memory);
  EXPECT_NE(render_text(p).find("no replica"), std::string::npos) << render_text(p);
}

TEST(NodePlan, KReplicasANodeFitOnlyWhereKWholeCoresAreLeft) {
  // Three cores a node, one reserved: two whole cores are left, so two
  // one-CPU replicas fit on each node and three fit on none.
  const Topology t = load(TopologySource::synthetic("pack:2 numa:1(memory=32GiB) core:3 pu:1"));
  const NodePlan p = plan_or_fail(t, config_with([](PlanConfig& c) { c.replicas_per_numa_node = 2; }));
  EXPECT_EQ(p.pod.cpus, 1u);
  EXPECT_EQ(p.pod.replicas_per_machine, 4u);
  auto none = plan_node(t, config_with([](PlanConfig& c) { c.replicas_per_numa_node = 3; }));
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().field, "replicas_per_numa_node");
  EXPECT_NE(none.error().message.find("node 0: it has 2 whole core(s) after the reservation; 3 replica(s) need 3"),
            std::string::npos)
      << none.error().message;
}

TEST(NodePlan, TheStaticCpuManagerNeedsAReservedCpu) {
  auto p = plan_node(load(TopologySource::synthetic("pack:2 numa:1(memory=8GiB) core:4 pu:1")),
                     config_with([](PlanConfig& c) { c.reserved_cores_per_node = 0; }));
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().field, "reserved_cores_per_node");
}

TEST(NodePlan, MachineWithoutMemorySizesIsRefused) {
  auto p = plan_node(load(TopologySource::xml((fixtures_dir() / "topologies/xml/16em64t-4s2c2t.xml").string())), {});
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("reservations alone take"), std::string::npos) << p.error().message;
}

TEST(NodePlan, KubeletConfigQuotesStringMaps) {
  const NodePlan p = plan_or_fail(load(TopologySource::synthetic("pack:2 numa:1(memory=64GiB) core:4 pu:2")));
  const std::string yaml = kubelet_config_yaml(p);
  EXPECT_NE(yaml.find("full-pcpus-only: \"true\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("reservedSystemCPUs: \"0-1,8-9\""), std::string::npos) << yaml;
}

}  // namespace
}  // namespace numaserve::agent::plan
