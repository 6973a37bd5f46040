#include "numa/numa.h"

#include <gtest/gtest.h>
#include <numaif.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "numaserve/common/placement.h"

namespace numaserve::numa {
namespace {

TEST(BindThread, BindsTheCallingThread) {
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

TEST(BindMemory, OnTheAllowedNodeOrAReason) {
  // In a child, so the test process keeps its default policy.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const auto outcome = bind_memory(NodeSet{0});
    const char result = outcome.applied ? 'y' : (outcome.reason.empty() ? '?' : 'n');
    (void)!write(fds[1], &result, 1);
    _exit(0);
  }
  char result = 0;
  ASSERT_EQ(read(fds[0], &result, 1), 1);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(result == 'y' || result == 'n') << "applied, or not with a reason";
  EXPECT_FALSE(bind_memory({}).applied);
  EXPECT_EQ(bind_memory({}).reason, "no memory nodes to bind to");
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

// What a pod under the runtime's default seccomp profile gets: the pages of
// the mappings that hold the ranges. A mapping of its own, touched: all of
// its pages, on an allowed node; untouched: none resident.
TEST(Locate, MappingsFromNumaMapsWhereMovePagesIsRefused) {
  constexpr std::size_t kPages = 256;
  auto* touched = static_cast<char*>(mmap(nullptr, kPages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  void* fresh = mmap(nullptr, 16 * 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(touched, MAP_FAILED);
  ASSERT_NE(fresh, MAP_FAILED);
  for (std::size_t i = 0; i < kPages * 4096; i += 4096) touched[i] = 1;
  auto pages = locate_mappings({{touched + 4096, 10}});  // inside the mapping, not at its start
  auto none = locate_mappings({{fresh, 16 * 4096}});
  munmap(touched, kPages * 4096);
  munmap(fresh, 16 * 4096);
  ASSERT_TRUE(pages.has_value()) << pages.error().message;
  EXPECT_EQ(pages->method, "numa_maps");
  // The kernel may merge the mapping with a neighbour of the same kind.
  EXPECT_GE(pages->resident(), kPages);
  EXPECT_DOUBLE_EQ(pages->share_on(discover_placement("/").value().mems()), 1.0);
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_EQ(none->resident(), 0u);
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

// What the supervisor's child does between fork and exec: the CPUs and
// the memory policy it was given, made before fork.
TEST(ForkSafeBinding, PinsAndBindsTheChild) {
  const auto cpus = discover_placement("/").value().cpus();
  const CpuSet first = CpuSet::range(cpus.ids().front(), cpus.ids().front());
  const ForkSafeBinding binding(first, NodeSet{0});
  const ForkSafeBinding cpus_only(cpus, std::nullopt);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    binding.apply();
    cpu_set_t mask;
    CPU_ZERO(&mask);
    sched_getaffinity(0, sizeof mask, &mask);
    int mode = -1;
    unsigned long nodes = 0;
    get_mempolicy(&mode, &nodes, 64, nullptr, 0);
    // 'b': bound to node 0, 'd': the kernel refused (seccomp), default kept.
    const char policy = mode == MPOL_BIND && nodes == 1 ? 'b' : mode == MPOL_DEFAULT ? 'd' : '?';
    const int pinned = CPU_COUNT(&mask);
    cpus_only.apply();
    sched_getaffinity(0, sizeof mask, &mask);
    // One write: the parent's one read gets all three bytes.
    const char result[3] = {static_cast<char>(pinned), policy, static_cast<char>(CPU_COUNT(&mask))};
    (void)!write(fds[1], result, 3);
    _exit(0);
  }
  char result[3] = {};
  ASSERT_EQ(read(fds[0], result, 3), 3);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(result[0], 1);
  EXPECT_TRUE(result[1] == 'b' || result[1] == 'd') << result[1];
  EXPECT_EQ(static_cast<unsigned char>(result[2]), cpus.count() % 256);
}

}  // namespace
}  // namespace numaserve::numa
