#include "fleet/fleet.h"

#include <gtest/gtest.h>

#include "discover/discover.h"
#include "fixture_paths.h"
#include "golden.h"
#include "numaserve/common/text_file.h"
#include "plan/plan.h"
#include "publish/nrt.h"
#include "publish/yaml.h"

namespace numaserve::kube::fleet {
namespace {

constexpr std::uint64_t kGi = 1ull << 30;

// A NodeResourceTopology as the agent publishes it: `zones` NUMA zones of
// `cpus` allocatable CPUs and `memory` allocatable bytes each.
nlohmann::json nrt(const std::string& name, unsigned zones, unsigned cpus, std::uint64_t memory,
                   const std::string& policy = "single-numa-node", const std::string& scope = "pod",
                   unsigned available = 0) {
  nlohmann::json z = nlohmann::json::array();
  for (unsigned i = 0; i < zones; ++i) {
    z.push_back({{"name", "node-" + std::to_string(i)},
                 {"type", "Node"},
                 {"resources", {{{"name", "cpu"}, {"capacity", cpus + 2}, {"allocatable", cpus}, {"available", available}},
                                {{"name", "memory"}, {"capacity", memory}, {"allocatable", memory}, {"available", 0}}}}});
  }
  return {{"apiVersion", "topology.node.k8s.io/v1alpha2"},
          {"kind", "NodeResourceTopology"},
          {"metadata", {{"name", name}}},
          {"zones", z},
          {"attributes", {{{"name", "topologyManagerPolicy"}, {"value", policy}},
                          {{"name", "topologyManagerScope"}, {"value", scope}}}}};
}

// What read_objects() makes of an NRT: its shape (threads from the labels).
Shape as_read(const nlohmann::json& object) {
  auto shape = shape_of(object, 1);
  EXPECT_TRUE(shape) << shape.error().message;
  return shape.value_or(Shape{});
}

FleetNode node(const std::string& name, const nlohmann::json& object, unsigned threads = 2) {
  return {name, {{"numaserve.io/numa-nodes", "2"}, {"numaserve.io/threads-per-core", std::to_string(threads)}},
          as_read(object)};
}

// The fleet of the issue: Xeon E5 (56 threads, NUMA nodes of 28, 26
// allocatable) and Xeon Gold (96 threads, NUMA nodes of 48, 46 allocatable).
std::vector<FleetNode> two_generations() {
  return {node("e5-1", nrt("e5-1", 2, 26, 120 * kGi)), node("e5-2", nrt("e5-2", 2, 26, 120 * kGi)),
          node("gold-1", nrt("gold-1", 2, 46, 180 * kGi)), node("gold-2", nrt("gold-2", 2, 46, 180 * kGi))};
}

const ClassPlan& class_of(const FleetPlan& plan, const std::string& node) {
  for (const auto& c : plan.classes) {
    if (std::find(c.nodes.begin(), c.nodes.end(), node) != c.nodes.end()) return c;
  }
  ADD_FAILURE() << node << " is in no class";
  return plan.classes.front();
}

// One Service gives each replica an equal share of requests: the 26-CPU
// replicas saturate while the 46-CPU ones still have room. By hand: 4 + 4
// replicas, each loaded as a 26-CPU one at saturation, of 4 x 26 + 4 x 46
// planned CPUs.
TEST(FleetPlan, OneServiceReachesOnlyTheSmallestReplicasShareOfACapacity) {
  auto plan = plan_fleet(two_generations(), {});
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->smallest_replica_cpus(), 26u);
  EXPECT_DOUBLE_EQ(plan->equal_split_share(), (8.0 * 26) / (4 * 26 + 4 * 46));
  EXPECT_NE(render_text(*plan).find("one Service through kube-proxy puts 72% of the planned CPUs to work (the 26-CPU "
                                    "replicas saturate first)"),
            std::string::npos)
      << render_text(*plan);
  // One replica size: every CPU reachable, and nothing to say.
  auto uniform = plan_fleet(two_generations(), {.sizing = Sizing::kUniform, .uniform_min_use = 0.85});
  ASSERT_TRUE(uniform) << uniform.error().message;
  EXPECT_DOUBLE_EQ(uniform->equal_split_share(), 1.0);
  EXPECT_EQ(render_text(*uniform).find("traffic:"), std::string::npos);
}

TEST(FleetPlan, PerClassFillsOneNumaNodeOfEachClass) {
  auto plan = plan_fleet(two_generations(), {});
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->classes.size(), 2u);
  const auto& e5 = class_of(*plan, "e5-1");
  const auto& gold = class_of(*plan, "gold-1");
  EXPECT_EQ(e5.nodes, (std::vector<std::string>{"e5-1", "e5-2"}));
  EXPECT_EQ(e5.cpus, 26u);
  EXPECT_EQ(gold.cpus, 46u);
  EXPECT_EQ(e5.replicas_per_machine, 2u);
  EXPECT_EQ(gold.replicas_per_machine, 2u);
  EXPECT_EQ(e5.memory_bytes, static_cast<std::uint64_t>(120 * kGi * 0.9) / (1 << 20) * (1 << 20));
  EXPECT_EQ(plan->cpus_used(), plan->cpus_allocatable());
  EXPECT_TRUE(plan->unplanned.empty());
}

TEST(FleetPlan, UniformTakesTheLargestSizeThatPutsNinetyPercentToWork) {
  auto plan = plan_fleet(two_generations(), {.sizing = Sizing::kUniform});
  ASSERT_TRUE(plan) << plan.error().message;
  // 22 CPUs: one per E5 NUMA node, two per Gold one; 26 would leave each
  // Gold NUMA node 20 idle (72%), 24 likewise (67%).
  const auto& e5 = class_of(*plan, "e5-1");
  const auto& gold = class_of(*plan, "gold-1");
  EXPECT_EQ(e5.cpus, 22u);
  EXPECT_EQ(gold.cpus, 22u);
  EXPECT_EQ(e5.replicas_per_machine, 2u);
  EXPECT_EQ(gold.replicas_per_machine, 4u);
  EXPECT_EQ(plan->cpus_used(), 2 * 44u + 2 * 88u);
  EXPECT_EQ(plan->cpus_allocatable(), 2 * 52u + 2 * 92u);
  // Memory is each class's zone share: one E5 replica takes its zone's,
  // two Gold replicas split theirs.
  EXPECT_EQ(e5.memory_bytes, static_cast<std::uint64_t>(120 * kGi * 0.9) / (1 << 20) * (1 << 20));
  EXPECT_EQ(gold.memory_bytes, static_cast<std::uint64_t>(180 * kGi * 0.9 / 2) / (1 << 20) * (1 << 20));
  EXPECT_TRUE(plan->notes.empty());
}

TEST(FleetPlan, UniformSaysSoWhenNoSizeReachesTheMinimum) {
  auto plan = plan_fleet(two_generations(), {.sizing = Sizing::kUniform, .uniform_min_use = 0.99});
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_NE(plan->notes[0].find("no size of more than one core puts 99%"), std::string::npos) << plan->notes[0];
  EXPECT_GT(class_of(*plan, "e5-1").cpus, 0u);
}

TEST(FleetPlan, HugepagesBoundTheReplicasAZoneHolds) {
  // Gold zones with 3Gi of 1Gi pages, E5 zones with none.
  auto fleet = two_generations();
  for (auto& n : fleet) {
    if (n.name.starts_with("gold")) {
      for (auto& z : n.shape->zones) z.hugepages["hugepages-1Gi"] = 3 * kGi;
    }
  }
  FleetConfig per_class{.replicas_per_numa_node = 2, .hugepages_per_replica = {{"hugepages-1Gi", kGi}}};
  auto plan = plan_fleet(fleet, per_class);
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->classes.size(), 1u);  // the E5 machines have no hugepages
  EXPECT_EQ(plan->classes[0].replicas_per_machine, 4u);
  EXPECT_EQ(plan->classes[0].hugepages.at("hugepages-1Gi"), kGi);
  ASSERT_EQ(plan->unplanned.size(), 2u);
  EXPECT_NE(plan->unplanned[0].reason.find("1Gi of hugepages-1Gi"), std::string::npos) << plan->unplanned[0].reason;
  // Uniform: 22-CPU replicas would fit two a Gold zone, its pages three: two.
  auto uniform = plan_fleet(fleet, {.sizing = Sizing::kUniform, .uniform_min_use = 0.5,
                                    .hugepages_per_replica = {{"hugepages-1Gi", kGi}}});
  ASSERT_TRUE(uniform) << uniform.error().message;
  EXPECT_EQ(class_of(*uniform, "gold-1").replicas_per_machine * class_of(*uniform, "gold-1").cpus, 2u * 46u);
  EXPECT_TRUE(parse_hugepages("hugepages-2Mi=1Gi,hugepages-1Gi=2Gi").has_value());
  EXPECT_FALSE(parse_hugepages("memory=1Gi").has_value());
  EXPECT_FALSE(parse_hugepages("hugepages-2Mi=lots").has_value());
}

TEST(FleetPlan, WholeCoresUnderSmt) {
  // 27 allocatable CPUs with 2 threads a core: 26, never a split core.
  auto plan = plan_fleet({node("odd", nrt("odd", 2, 27, 64 * kGi))}, {});
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->classes[0].cpus, 26u);
  auto without_smt = plan_fleet({node("odd", nrt("odd", 2, 27, 64 * kGi), 1)}, {});
  ASSERT_TRUE(without_smt);
  EXPECT_EQ(without_smt->classes[0].cpus, 27u);
}

TEST(MachineClass, AllocatableDecidesAvailableDoesNot) {
  auto shape = [](const nlohmann::json& object, unsigned threads = 2) { return machine_class(*shape_of(object, threads)); };
  const std::string base = shape(nrt("a", 2, 26, 120 * kGi));
  EXPECT_EQ(base.size(), 13u);
  EXPECT_EQ(base.substr(0, 3), "mc-");
  EXPECT_EQ(shape(nrt("b", 2, 26, 120 * kGi, "single-numa-node", "pod", 4)), base) << "running pods changed the class";
  EXPECT_NE(shape(nrt("a", 2, 24, 120 * kGi)), base) << "reserved CPUs did not change it";
  EXPECT_NE(shape(nrt("a", 2, 26, 100 * kGi)), base);
  EXPECT_NE(shape(nrt("a", 4, 26, 120 * kGi)), base);
  EXPECT_NE(shape(nrt("a", 2, 26, 120 * kGi, "best-effort")), base);
  EXPECT_NE(shape(nrt("a", 2, 26, 120 * kGi, "single-numa-node", "container")), base);
  EXPECT_NE(shape(nrt("a", 2, 26, 120 * kGi), 1), base);
}

TEST(FleetPlan, NodesThatCannotBePlannedSayWhy) {
  auto nodes = two_generations();
  nodes.push_back({"no-nrt", {{"numaserve.io/numa-nodes", "2"}}, std::nullopt});
  nodes.push_back({"no-agent-labels", {}, as_read(nrt("no-agent-labels", 2, 26, 120 * kGi))});
  nodes.push_back(node("best-effort", nrt("best-effort", 2, 26, 120 * kGi, "best-effort")));
  nodes.push_back(node("container-scope", nrt("container-scope", 2, 26, 120 * kGi, "single-numa-node", "container")));
  nodes.push_back(node("one-thread", nrt("one-thread", 2, 1, 120 * kGi)));
  auto plan = plan_fleet(nodes, {});
  ASSERT_TRUE(plan) << plan.error().message;
  std::map<std::string, std::string> why;
  for (const auto& u : plan->unplanned) why[u.node] = u.reason;
  EXPECT_EQ(why.size(), 5u);
  EXPECT_NE(why["no-nrt"].find("no NodeResourceTopology"), std::string::npos);
  EXPECT_NE(why["no-agent-labels"].find("no numaserve.io labels"), std::string::npos);
  EXPECT_NE(why["best-effort"].find("policy best-effort, not single-numa-node"), std::string::npos);
  EXPECT_NE(why["container-scope"].find("scope container, not pod"), std::string::npos);
  EXPECT_NE(why["one-thread"].find("whole core"), std::string::npos);
  EXPECT_EQ(plan->classes.size(), 2u);

  auto nothing = plan_fleet({nodes.back(), nodes[nodes.size() - 2]}, {});
  ASSERT_FALSE(nothing);
  EXPECT_NE(nothing.error().message.find("one-thread: "), std::string::npos) << nothing.error().message;
  EXPECT_NE(nothing.error().message.find("container-scope: "), std::string::npos);
}

// tests/fixtures/fleet: a v1 List of NRTs and Node documents, quantities
// as kubectl prints them (also the fuzz target's seeds).
TEST(ReadObjects, ListsAndDocumentsWithQuantitiesAsKubectlPrintsThem) {
  const auto dir = testing::fixtures_dir() / "fleet";
  auto a = read_objects(*read_text_file(dir / "noderesourcetopologies.yaml"), "noderesourcetopologies.yaml");
  auto b = read_objects(*read_text_file(dir / "nodes.yaml"), "nodes.yaml");
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_TRUE(b) << b.error().message;
  const auto merged = merge({std::move(*a), std::move(*b)});
  ASSERT_EQ(merged.size(), 2u);
  auto plan = plan_fleet(merged, {});
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->classes.size(), 1u);
  EXPECT_EQ(plan->classes[0].cpus, 14u);
  EXPECT_EQ(plan->classes[0].shape.zones.size(), 1u) << "a memory-only zone holds no replica";
  EXPECT_EQ(plan->classes[0].replicas_per_machine, 1u);
  ASSERT_EQ(plan->unplanned.size(), 1u);
  EXPECT_EQ(plan->unplanned[0].node, "w2");
}

TEST(ReadObjects, MalformedInputNamesTheFileTheObjectAndTheField) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"kind: Pod\nmetadata: {name: p}\n", "in.yaml line 1: kind Pod: want Node or NodeResourceTopology objects"},
      {"kind: Node\nmetadata: {name: a}\n---\n\nkind: ConfigMap\nmetadata: {name: c}\n", "in.yaml line 5: kind ConfigMap"},
      {"kind: Node\nmetadata: {}\n", "in.yaml line 1: Node: metadata.name: want a name"},
      {"- a\n- b\n", "want Kubernetes objects, not a list"},
      {"kind: NodeResourceTopology\nmetadata: {name: n}\nzones:\n- name: node-0\n  resources:\n"
       "  - {name: cpu, allocatable: 14 cores}\n",
       "NodeResourceTopology n: zones[0].resources[0].allocatable: not a whole number of CPUs"},
      {"kind: NodeResourceTopology\nmetadata: {name: n}\nzones:\n- name: node-0\n  resources:\n"
       "  - {name: memory, allocatable: lots}\n",
       "NodeResourceTopology n: zones[0].resources[0].allocatable:"},
      {"kind: NodeResourceTopology\nmetadata: {name: n}\nzones: 3\n", "NodeResourceTopology n: zones: want a list"},
      {"kind: Node\nmetadata: {name: a, labels: [x]}\n", "Node a: metadata.labels: want a map"},
      {"kind: [unclosed\n", "in.yaml"},
  };
  for (const auto& c : cases) {
    auto read = read_objects(c.text, "in.yaml");
    ASSERT_FALSE(read) << c.text;
    EXPECT_NE(read.error().message.find(c.expected), std::string::npos) << read.error().message;
  }
}

// The label the agent puts on its node is the class cluster-plan finds for
// it in the object the agent publishes, read back as YAML (quantities as
// strings, where the agent wrote numbers).
TEST(MachineClass, TheAgentsLabelIsTheClassClusterPlanFinds) {
  for (const std::string xml : {"32em64t-2n8c2t-pci-normalio", "16amd64-4distances", "64intel64-fakeKNL-SNC4-hybrid"}) {
    auto report = agent::discover::discover_node(agent::discover::DiscoverConfig::of(
        TopologySource::xml((testing::fixtures_dir() / ("topologies/xml/" + xml + ".xml")).string())));
    ASSERT_TRUE(report) << xml;
    auto planned = agent::plan::plan_node(report->topology, {});
    ASSERT_TRUE(planned) << xml;
    const auto labels = agent::publish::make_node_labels(*report, &*planned);
    auto read = read_objects(agent::publish::to_yaml(agent::publish::make_node_resource_topology("w", *report, &*planned)), "nrt.yaml");
    ASSERT_TRUE(read) << read.error().message;
    ASSERT_EQ(read->size(), 1u);
    const unsigned threads = report->topology.threads_per_core();
    EXPECT_EQ(labels.at("numaserve.io/threads-per-core"), std::to_string(threads));
    Shape shape = *(*read)[0].shape;
    shape.threads_per_core = threads;
    EXPECT_EQ(labels.at("numaserve.io/machine-class"), machine_class(shape)) << xml;
  }
}

// --- Golden plans of whole fleets ------------------------------------------
// Each node is what its agent publishes: `plan -o nrt` and `-o labels` of a
// fixture machine under a kubelet configuration, as YAML (what kubectl
// prints back), read by cluster-plan's reader.

struct Machine {
  std::string node;
  TopologySource source;
  std::string kubelet = "numa-ready";  // tests/fixtures/kubelet/<this>/config.yaml
};

std::string agent_objects(const Machine& m) {
  auto config = agent::discover::DiscoverConfig::of(m.source);
  config.kubelet_config = testing::fixtures_dir() / "kubelet" / m.kubelet / "config.yaml";
  auto report = agent::discover::discover_node(config);
  EXPECT_TRUE(report) << m.node << ": " << report.error().message;
  if (!report) return "";
  auto planned = agent::plan::plan_node(report->topology, {});
  const agent::plan::NodePlan* p = planned ? &*planned : nullptr;
  nlohmann::json node = {{"apiVersion", "v1"},
                         {"kind", "Node"},
                         {"metadata", {{"name", m.node}, {"labels", agent::publish::make_node_labels(*report, p)}}}};
  return agent::publish::to_yaml(agent::publish::make_node_resource_topology(m.node, *report, p)) + "---\n" + agent::publish::to_yaml(node) +
         "---\n";
}

TopologySource xml(const std::string& name) {
  return TopologySource::xml((testing::fixtures_dir() / "topologies/xml" / (name + ".xml")).string());
}

void expect_fleet_matches_golden(const std::string& fleet, const std::vector<Machine>& machines,
                                 const std::string& extra_objects = "") {
  std::string objects;
  for (const auto& m : machines) objects += agent_objects(m);
  auto nodes = read_objects(objects + extra_objects, fleet + ".yaml");
  ASSERT_TRUE(nodes) << nodes.error().message;
  const auto dir = testing::fixtures_dir() / "fleet/golden";
  for (const Sizing sizing : {Sizing::kPerClass, Sizing::kUniform}) {
    FleetConfig config;
    config.sizing = sizing;
    auto planned = plan_fleet(*nodes, config);
    ASSERT_TRUE(planned) << planned.error().message;
    const std::string name = fleet + "." + std::string(to_string(sizing));
    testing::expect_matches_golden(render_text(*planned), dir / (name + ".txt"));
    testing::expect_matches_golden(nlohmann::json(*planned).dump(2) + "\n", dir / (name + ".json"));
    testing::expect_matches_golden(agent::publish::to_yaml(helm_values(*planned)), dir / (name + ".helm-values.yaml"));
  }
}

// The fleet the issue starts from: Xeon E5 (56 threads, NUMA nodes of 28)
// and Xeon Gold (96 threads, NUMA nodes of 48), two of each.
TEST(FleetGolden, TwoGenerations) {
  const auto e5 = TopologySource::synthetic("pack:2 numa:1(memory=128GiB) core:14 pu:2");
  const auto gold = TopologySource::synthetic("pack:2 numa:1(memory=192GiB) core:24 pu:2");
  expect_fleet_matches_golden("two-generations", {{"e5-1", e5}, {"e5-2", e5}, {"gold-1", gold}, {"gold-2", gold}});
}

// The fixture machines side by side: 2-socket Xeons with SMT of two sizes,
// an 8-NUMA-node Opteron, a machine with offline CPUs, a Knights Landing in
// SNC-4 with memory-only MCDRAM zones, and two that cannot be planned: a
// kubelet without the single-numa-node policy, a node with no agent.
TEST(FleetGolden, FixtureMachines) {
  expect_fleet_matches_golden(
      "fixture-machines",
      {{"xeon-16c-1", xml("32em64t-2n8c2t-pci-normalio")},
       {"xeon-16c-2", xml("32em64t-2n8c2t-pci-normalio")},
       {"xeon-12c", xml("24em64t-2n6c2t-pci")},
       {"opteron-8n", TopologySource::sysfs(testing::sysfs_root("16amd64-8n2c").string())},
       {"offline-cpus", xml("16em64t-4s2c2t-offlines")},
       {"knl-snc4", xml("64intel64-fakeKNL-SNC4-hybrid")},
       {"kubeadm-defaults", xml("16amd64-4distances"), "defaults"}},
      "apiVersion: v1\nkind: Node\nmetadata: {name: no-agent}\n");
}

}  // namespace
}  // namespace numaserve::kube::fleet
