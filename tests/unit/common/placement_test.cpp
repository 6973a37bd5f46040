#include "numaserve/common/placement.h"

#include <gtest/gtest.h>
#include <sched.h>

#include "fixture_paths.h"

namespace numaserve {
namespace {

std::filesystem::path tree(const std::string& name) {
  return testing::fixtures_dir() / "cgroup" / name;
}

Placement read_or_fail(const std::string& name) {
  auto placement = discover_placement(tree(name));
  EXPECT_TRUE(placement.has_value()) << name << ": " << placement.error().message;
  return placement.value_or(Placement{});
}

bool mentions(const std::vector<std::string>& warnings, std::string_view text) {
  for (const auto& w : warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(Placement, CgroupV2GuaranteedPodGetsItsExclusiveCpusAndNode) {
  const Placement p = read_or_fail("v2-guaranteed-pod");
  ASSERT_TRUE(p.cgroup.has_value());
  EXPECT_EQ(p.cgroup->version, 2);
  EXPECT_EQ(p.cgroup->path, "/kubepods.slice/kubepods-pod1f2e.slice/cri-containerd-7a1b.scope");
  EXPECT_EQ(p.affinity.to_list(), "0-15");
  EXPECT_EQ(p.cpus().to_list(), "2-5");
  EXPECT_EQ(p.mems().to_list(), "0");
  ASSERT_TRUE(p.cgroup->cpu_limit.has_value());
  EXPECT_DOUBLE_EQ(*p.cgroup->cpu_limit, 4.0);
  EXPECT_TRUE(check_placement(p).empty());
}

TEST(Placement, CgroupV2NamespaceReadsTheMountRoot) {
  const Placement p = read_or_fail("v2-cgroupns-burstable");
  ASSERT_TRUE(p.cgroup.has_value());
  EXPECT_EQ(p.cgroup->path, "/");
  EXPECT_EQ(p.cpus().to_list(), "0-7");
  EXPECT_DOUBLE_EQ(p.cgroup->cpu_limit.value_or(0), 2.5);
}

TEST(Placement, QuotaWithoutExclusiveCpusIsReported) {
  const auto warnings = check_placement(read_or_fail("v2-cgroupns-burstable"));
  EXPECT_TRUE(mentions(warnings, "CPU limit of 2.5 CPUs over a cpuset of 8 CPUs")) << ::testing::PrintToString(warnings);
  EXPECT_TRUE(mentions(warnings, "fractional CPU limit of 2.5"));
}

TEST(Placement, CgroupV2LeafWithoutCpusetUsesItsParentsEffectiveSet) {
  const Placement p = read_or_fail("v2-no-cpuset-in-leaf");
  EXPECT_EQ(p.cpus().to_list(), "8-15");
  EXPECT_EQ(p.mems().to_list(), "1");
  EXPECT_FALSE(p.cgroup->cpu_limit.has_value());  // "max" is no limit
}

TEST(Placement, CgroupV1HybridLayout) {
  const Placement p = read_or_fail("v1-hybrid-docker");
  ASSERT_TRUE(p.cgroup.has_value());
  EXPECT_EQ(p.cgroup->version, 1);
  EXPECT_EQ(p.cgroup->path, "/docker/5d2c9e");
  EXPECT_EQ(p.cpus().to_list(), "0-3,8-11");
  EXPECT_EQ(p.mems().to_list(), "0");
  EXPECT_DOUBLE_EQ(p.cgroup->cpu_limit.value_or(0), 8.0);
  EXPECT_TRUE(check_placement(p).empty());
}

TEST(Placement, CgroupV1ContainerWhoseMountRootIsItsOwnCgroup) {
  const Placement p = read_or_fail("v1-container-bind");
  EXPECT_EQ(p.cgroup->version, 1);
  EXPECT_EQ(p.cpus().to_list(), "4-7");
  EXPECT_EQ(p.mems().to_list(), "1");
  EXPECT_DOUBLE_EQ(p.cgroup->cpu_limit.value_or(0), 4.0);
}

TEST(Placement, WithoutCgroupAffinityAndMemsAllowedDecide) {
  const Placement p = read_or_fail("no-cgroup");
  EXPECT_FALSE(p.cgroup.has_value());
  EXPECT_EQ(p.cpus().to_list(), "0-1");
  EXPECT_EQ(p.mems().to_list(), "0");
}

TEST(Placement, AffinityNarrowerThanCgroupWins) {
  Placement p = read_or_fail("v2-guaranteed-pod");
  p.affinity = CpuSet{3, 4};  // e.g. taskset inside the container
  EXPECT_EQ(p.cpus().to_list(), "3-4");
}

TEST(Placement, MalformedCpusetFileNamesFileAndToken) {
  auto p = discover_placement(tree("bad-cpuset"));
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(p.error().message.find("cpuset.cpus.effective"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("'x7'"), std::string::npos) << p.error().message;
}

TEST(Placement, MalformedCpuMaxNamesTheFile) {
  auto p = discover_placement(tree("bad-cpu-max"));
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("cpu.max"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("lots"), std::string::npos) << p.error().message;
}

TEST(Placement, MissingStatusFileIsAClearError) {
  auto p = discover_placement(tree("no-status"));
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, Error::Code::kNotFound);
  EXPECT_NE(p.error().message.find("proc/self/status"), std::string::npos) << p.error().message;
}

TEST(Placement, MissingMountTableIsAClearError) {
  auto p = discover_placement(tree("no-mountinfo"));
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, Error::Code::kNotFound);
  EXPECT_NE(p.error().message.find("proc/self/mountinfo"), std::string::npos) << p.error().message;
}

TEST(Placement, WarnsWhenCpusSpanNodesOrMemoryIsRemote) {
  auto topology = discover_topology(TopologySource::synthetic("pack:2 numa:1 core:4 pu:1"));
  ASSERT_TRUE(topology.has_value());
  Placement spanning;
  spanning.affinity = CpuSet::range(2, 5);
  spanning.mems_allowed = NodeSet{0, 1};
  EXPECT_TRUE(mentions(check_placement(spanning, &*topology), "span NUMA nodes 0-1"));

  Placement remote;
  remote.affinity = CpuSet::range(0, 3);
  remote.mems_allowed = NodeSet{1};
  EXPECT_TRUE(mentions(check_placement(remote, &*topology), "every allocation is remote"));

  Placement good;
  good.affinity = CpuSet::range(4, 7);
  good.mems_allowed = NodeSet{1};
  EXPECT_TRUE(check_placement(good, &*topology).empty());
}

TEST(Placement, LiveProcessMatchesSchedGetaffinity) {
  auto p = discover_placement();
  ASSERT_TRUE(p.has_value()) << p.error().message;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  EXPECT_EQ(p->affinity.count(), static_cast<std::size_t>(CPU_COUNT(&mask)));
  for (unsigned cpu : p->affinity.ids()) EXPECT_TRUE(CPU_ISSET(cpu, &mask)) << cpu;
  EXPECT_FALSE(p->cpus().empty());
  EXPECT_FALSE(p->mems().empty());
}

// The room a reload checks a new version's weights against: the binding
// level's limit less its working set (usage less inactive page cache).
TEST(CgroupMemory, V2PodLimitBindsWhenTheContainerHasNone) {
  auto m = discover_cgroup_memory(tree("v2-guaranteed-pod"));
  ASSERT_TRUE(m.has_value()) << m.error().message;
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->version, 2);
  EXPECT_EQ((*m)->dir.filename(), "kubepods-pod1f2e.slice");
  EXPECT_EQ((*m)->limit.value_or(0), 4ULL << 30);
  EXPECT_EQ((*m)->working_set, 3221225472ULL - 268435456ULL);
  EXPECT_EQ((*m)->room().value_or(0), 1342177280ULL);
}

TEST(CgroupMemory, V1ContainerLimitWithTheRootsUnlimitedValue) {
  auto m = discover_cgroup_memory(tree("v1-hybrid-docker"));
  ASSERT_TRUE(m.has_value()) << m.error().message;
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->version, 1);
  EXPECT_EQ((*m)->dir.filename(), "5d2c9e");
  EXPECT_EQ((*m)->limit.value_or(0), 2ULL << 30);
  EXPECT_EQ((*m)->room().value_or(0), 1ULL << 30);  // total_inactive_file, not the cgroup's own inactive_file
}

TEST(CgroupMemory, NoMemoryControllerOrNoCgroupMeansNothingToCheck) {
  for (const char* name : {"no-cgroup", "v2-cgroupns-burstable"}) {
    auto m = discover_cgroup_memory(tree(name));
    ASSERT_TRUE(m.has_value()) << name << ": " << m.error().message;
    EXPECT_TRUE(!m->has_value() || !(*m)->limit) << name;
  }
}

TEST(CgroupMemory, LiveProcessReadsWithoutError) {
  auto m = discover_cgroup_memory();
  ASSERT_TRUE(m.has_value()) << m.error().message;
  if (m->has_value() && (*m)->limit) {
    EXPECT_LE((*m)->working_set, *(*m)->limit + (1ULL << 30));
  }
}

}  // namespace
}  // namespace numaserve
