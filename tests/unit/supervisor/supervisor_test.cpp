#include "supervisor/supervisor.h"

#include <gtest/gtest.h>

#include "machines.h"

namespace numaserve::supervisor {
namespace {

using numaserve::testing::confined_to;
using numaserve::testing::synthetic_machine;

TEST(PlanReplicas, OnePerNodeGetsTheNodesCpusAndMemory) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:4 pu:2");
  auto replicas = plan_replicas(confined_to(t.online_cpus, NodeSet::range(0, 1)), t, {1, 0, Bind::kNuma});
  ASSERT_TRUE(replicas.has_value()) << replicas.error().message;
  ASSERT_EQ(replicas->size(), 2u);
  for (unsigned n = 0; n < 2; ++n) {
    EXPECT_EQ((*replicas)[n].node, n);
    EXPECT_EQ((*replicas)[n].cpus, t.node(n)->cpus);
    EXPECT_EQ((*replicas)[n].mems, NodeSet{n});
  }
  EXPECT_EQ((*replicas)[1].name(), "replica-1 (node 1)");
}

TEST(PlanReplicas, SeveralPerNodeSplitWholeCoresInsideTheCpuset) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:4 pu:2");  // node 0: cores {0,1} {2,3} {4,5} {6,7}
  // The cpuset leaves out node 0's first core: 3 cores there, 4 on node 1.
  auto replicas = plan_replicas(confined_to(t.online_cpus - CpuSet::range(0, 1), NodeSet::range(0, 1)), t, {2, 0, Bind::kNuma});
  ASSERT_TRUE(replicas.has_value()) << replicas.error().message;
  ASSERT_EQ(replicas->size(), 4u);
  EXPECT_EQ((*replicas)[0].cpus.to_list(), "2-3");
  EXPECT_EQ((*replicas)[1].cpus.to_list(), "4-7");
  EXPECT_EQ((*replicas)[2].cpus.to_list(), "8-11");
  EXPECT_EQ((*replicas)[3].cpus.to_list(), "12-15");
  for (const auto& s : *replicas) EXPECT_FALSE(s.cpus.intersects(CpuSet::range(0, 1)));
}

TEST(PlanReplicas, OnlyNodesWithAllowedCpusGetReplicas) {
  const Topology t = synthetic_machine("pack:4 numa:1 core:2 pu:1");
  auto replicas = plan_replicas(confined_to(t.node(2)->cpus | t.node(3)->cpus, NodeSet::range(0, 3)), t, {1, 0, Bind::kNuma});
  ASSERT_TRUE(replicas.has_value());
  ASSERT_EQ(replicas->size(), 2u);
  EXPECT_EQ((*replicas)[0].node, 2u);
  EXPECT_EQ((*replicas)[1].node, 3u);
}

TEST(PlanReplicas, ReplicasSpreadEvenlyOrAreRefused) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:4 pu:1");
  auto four = plan_replicas(confined_to(t.online_cpus, NodeSet::range(0, 1)), t, {0, 4, Bind::kNuma});
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(four->size(), 4u);
  auto three = plan_replicas(confined_to(t.online_cpus, NodeSet::range(0, 1)), t, {0, 3, Bind::kNuma});
  ASSERT_FALSE(three.has_value());
  EXPECT_NE(three.error().message.find("3 replicas do not spread evenly over the 2 NUMA nodes"), std::string::npos);
  auto crowded = plan_replicas(confined_to(t.online_cpus, NodeSet::range(0, 1)), t, {5, 0, Bind::kNuma});
  ASSERT_FALSE(crowded.has_value());
  EXPECT_NE(crowded.error().message.find("5 replicas per NUMA node need 5 cores, node 0 has 4 allowed (CPUs 0-3)"),
            std::string::npos)
      << crowded.error().message;
}

TEST(PlanReplicas, UnboundReplicasShareTheWholeCpuset) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:2 pu:1");
  auto replicas = plan_replicas(confined_to(t.online_cpus, NodeSet::range(0, 1)), t, {0, 2, Bind::kNone});
  ASSERT_TRUE(replicas.has_value());
  ASSERT_EQ(replicas->size(), 2u);
  for (const auto& s : *replicas) {
    EXPECT_FALSE(s.node.has_value());
    EXPECT_EQ(s.cpus, t.online_cpus);
    EXPECT_EQ(s.mems.to_list(), "0-1");
  }
}

TEST(PlanReplicas, ANodeWhoseMemoryIsNotAllowedUsesTheAllowedMemory) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:2 pu:1");
  auto replicas = plan_replicas(confined_to(t.online_cpus, NodeSet{0}), t, {1, 0, Bind::kNuma});
  ASSERT_TRUE(replicas.has_value());
  EXPECT_EQ((*replicas)[1].mems.to_list(), "0");  // node 1's replica may only use node 0's memory
}

}  // namespace
}  // namespace numaserve::supervisor
