#include "threads/threads.h"

#include <gtest/gtest.h>

#include "machines.h"

namespace numaserve::threads {
namespace {

using numaserve::testing::confined_to;
using numaserve::testing::synthetic_machine;

CpuSet all_worker_cpus(const ThreadPlan& plan) {
  CpuSet out;
  for (const auto& w : plan.workers) out |= w.cpus;
  return out;
}

TEST(ThreadPlan, OneWorkerPerCoreWithSiblingsTogether) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:4 pu:2");  // node 1: CPUs 8-15, cores {8,9} ...
  auto plan = plan_threads(confined_to(t.node(1)->cpus, NodeSet{1}), t, {});
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_EQ(plan->workers.size(), 4u);
  EXPECT_EQ(plan->intra_op_threads, 2u);
  for (const auto& w : plan->workers) EXPECT_EQ(w.cpus.count(), 2u);
  EXPECT_EQ(plan->workers[0].cpus.to_list(), "8-9");
  EXPECT_EQ(all_worker_cpus(*plan), t.node(1)->cpus);
  EXPECT_EQ(plan->numa_nodes.to_list(), "1");
  EXPECT_TRUE(plan->notes.empty());
}

TEST(ThreadPlan, MemoryBindsToTheNodesOfTheCpus) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:4 pu:2");
  // Pinned to node 1's CPUs (taskset, a supervisor's worker) while the
  // cgroup allows both nodes: memory goes to node 1.
  auto pinned = plan_threads(confined_to(t.node(1)->cpus, NodeSet::range(0, 1)), t, {});
  ASSERT_TRUE(pinned.has_value());
  EXPECT_EQ(pinned->memory_nodes.to_list(), "1");
  EXPECT_EQ(pinned->mems.to_list(), "0-1");
  // Spanning both: both. Memory allowed only away from the CPUs: that memory.
  auto spanning = plan_threads(confined_to(t.online_cpus, NodeSet::range(0, 1)), t, {});
  EXPECT_EQ(spanning->memory_nodes.to_list(), "0-1");
  auto remote = plan_threads(confined_to(t.node(1)->cpus, NodeSet{0}), t, {});
  EXPECT_EQ(remote->memory_nodes.to_list(), "0");
}

TEST(ThreadPlan, SizedToTheCpusetNotTheHost) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:16 pu:2");  // 64 CPUs on the host
  auto plan = plan_threads(confined_to(CpuSet::range(4, 7), NodeSet{0}), t, {});
  ASSERT_TRUE(plan.has_value());
  EXPECT_LE(plan->workers.size() * plan->intra_op_threads, 4u);
  EXPECT_EQ(all_worker_cpus(*plan).to_list(), "4-7");
}

TEST(ThreadPlan, ExplicitCountsAreHonouredOrRefused) {
  const Topology t = synthetic_machine("pack:1 numa:1 core:8 pu:1");
  auto two = plan_threads(confined_to(CpuSet::range(0, 7), NodeSet{0}), t, {2, 0});
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->workers.size(), 2u);
  EXPECT_EQ(two->intra_op_threads, 4u);
  EXPECT_EQ(two->workers[0].cpus.count(), 4u);
  auto wide = plan_threads(confined_to(CpuSet::range(0, 7), NodeSet{0}), t, {0, 8});
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(wide->workers.size(), 1u);
  auto too_many = plan_threads(confined_to(CpuSet::range(0, 3), NodeSet{0}), t, {3, 2});
  ASSERT_FALSE(too_many.has_value());
  EXPECT_EQ(too_many.error().message, "3 workers x 2 intra-op threads need 6 CPUs, the cpuset has 4 (0-3)");
}

TEST(ThreadPlan, SpanningNodesIsNoted) {
  const Topology t = synthetic_machine("pack:2 numa:1 core:2 pu:1");
  auto plan = plan_threads(confined_to(CpuSet::range(0, 3), NodeSet{0, 1}), t, {});
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_NE(plan->notes[0].find("span NUMA nodes 0-1"), std::string::npos);
}

TEST(ThreadPlan, NoUsableCpusIsAnError) {
  const Topology t = synthetic_machine("pack:1 numa:1 core:2 pu:1");
  auto plan = plan_threads(confined_to(CpuSet{40}, NodeSet{0}), t, {});
  ASSERT_FALSE(plan.has_value());
  EXPECT_NE(plan.error().message.find("no usable CPUs"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::threads
