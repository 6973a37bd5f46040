#include "placement/placement.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "machines.h"

namespace numaserve::placement {
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

TEST(Apply, BindsTheCallingThread) {
  const CpuSet first{0};
  std::size_t count = 0;
  std::thread worker([&] {
    ASSERT_TRUE(bind_current_thread(first).has_value());
    cpu_set_t mask;
    CPU_ZERO(&mask);
    sched_getaffinity(0, sizeof mask, &mask);
    count = static_cast<std::size_t>(CPU_COUNT(&mask));
    EXPECT_TRUE(CPU_ISSET(0, &mask));
  });
  worker.join();
  EXPECT_EQ(count, 1u);
  auto none = bind_current_thread({});
  EXPECT_FALSE(none.has_value());
  auto offline = bind_current_thread(CpuSet{4000});
  ASSERT_FALSE(offline.has_value());
  EXPECT_NE(offline.error().message.find("cannot bind thread to CPUs 4000"), std::string::npos);
}

TEST(Apply, MemoryPolicyOnTheAllowedNodeOrAReason) {
  // In a child, so the test process keeps its default policy.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const auto outcome = apply_memory_policy(NodeSet{0});
    const char result = outcome.applied ? 'y' : (outcome.reason.empty() ? '?' : 'n');
    (void)!write(fds[1], &result, 1);
    _exit(0);
  }
  char result = 0;
  ASSERT_EQ(read(fds[0], &result, 1), 1);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(result == 'y' || result == 'n') << "applied, or not with a reason";
  EXPECT_FALSE(apply_memory_policy({}).applied);
  EXPECT_EQ(apply_memory_policy({}).reason, "no memory nodes to bind to");
}

TEST(Locate, TouchedPagesAreResidentOnAnAllowedNode) {
  const std::size_t bytes = 64 * 4096;
  std::vector<char> touched(bytes, 1);
  auto pages = locate_pages({{touched.data(), bytes}, {touched.data(), 10}});  // overlap counts once
  ASSERT_TRUE(pages.has_value()) << pages.error().message;
  EXPECT_GE(pages->resident(), 64u);
  EXPECT_LE(pages->resident(), 65u);  // the vector need not start on a page boundary
  const auto mems = discover_placement("/").value().mems();
  EXPECT_DOUBLE_EQ(pages->share_on(mems), 1.0);
  EXPECT_DOUBLE_EQ(pages->share_on(NodeSet{}), 0.0);
}

TEST(Locate, UntouchedPagesAreNotResident) {
  void* fresh = mmap(nullptr, 16 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(fresh, MAP_FAILED);
  auto pages = locate_pages({{fresh, 16 * 4096}});
  munmap(fresh, 16 * 4096);
  ASSERT_TRUE(pages.has_value());
  EXPECT_EQ(pages->not_resident, 16u);
  EXPECT_EQ(pages->resident(), 0u);
  EXPECT_DOUBLE_EQ(pages->share_on(NodeSet{}), 1.0);  // nothing resident: nothing remote
}

TEST(Threads, ListsNamedThreadsWithTheirCpus) {
  const auto cpus = discover_placement("/").value().cpus();
  const CpuSet first = CpuSet::range(cpus.ids().front(), cpus.ids().front());
  std::atomic<bool> done{false};
  std::atomic<bool> started{false};
  std::thread worker([&] {
    pthread_setname_np(pthread_self(), "ns-test-thread");
    ASSERT_TRUE(bind_current_thread(first).has_value());
    started = true;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool found = false;
  for (const auto& t : list_threads()) {
    if (t.name != "ns-test-thread") continue;
    found = true;
    EXPECT_EQ(t.allowed_cpus, first);
    EXPECT_GT(t.tid, 0);
  }
  done = true;
  worker.join();
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace numaserve::placement
