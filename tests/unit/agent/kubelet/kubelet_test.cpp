#include "kubelet/kubelet.h"

#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve::agent::kubelet {
namespace {

std::string fixture(const std::string& name) {
  return read_text_file(testing::fixtures_dir() / "kubelet" / name).value_or("");
}

TEST(KubeletConfig, ReadsTheNumaSettings) {
  auto c = parse_kubelet_config(fixture("numa-ready/config.yaml"), "config.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->cpu_manager_policy, "static");
  EXPECT_EQ(c->cpu_manager_policy_options.at("full-pcpus-only"), "true");
  EXPECT_EQ(c->topology_manager_policy, "single-numa-node");
  EXPECT_EQ(c->topology_manager_scope, "pod");
  EXPECT_EQ(c->memory_manager_policy, "Static");
  EXPECT_EQ(c->reserved_system_cpus.to_list(), "0,8,16,24");
  EXPECT_TRUE(c->unknown_fields.empty()) << ::testing::PrintToString(c->unknown_fields);
}

TEST(KubeletConfig, DefaultsAndTyposAreReported) {
  auto c = parse_kubelet_config(fixture("defaults/config.yaml"), "config.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->cpu_manager_policy, "none");
  EXPECT_EQ(c->topology_manager_policy, "none");
  EXPECT_EQ(c->topology_manager_scope, "container");
  EXPECT_EQ(c->memory_manager_policy, "None");
  ASSERT_EQ(c->unknown_fields.size(), 1u);
  EXPECT_EQ(c->unknown_fields[0], "cpuManagerPolicyy (line 8)");
}

TEST(KubeletConfig, BadInputNamesFileAndLine) {
  auto wrong_kind = parse_kubelet_config(fixture("broken/config.yaml"), "config.yaml");
  ASSERT_FALSE(wrong_kind.has_value());
  EXPECT_NE(wrong_kind.error().message.find("kind is 'ConfigMap'"), std::string::npos);

  auto bad_yaml = parse_kubelet_config("kind: KubeletConfiguration\ncpuManagerPolicy: [static\n", "k.yaml");
  ASSERT_FALSE(bad_yaml.has_value());
  EXPECT_NE(bad_yaml.error().message.find("k.yaml line"), std::string::npos) << bad_yaml.error().message;

  auto bad_cpus = parse_kubelet_config("kind: KubeletConfiguration\nreservedSystemCPUs: \"0,x\"\n", "k.yaml");
  ASSERT_FALSE(bad_cpus.has_value());
  EXPECT_NE(bad_cpus.error().message.find("k.yaml line 2: reservedSystemCPUs"), std::string::npos)
      << bad_cpus.error().message;

  auto bad_map = parse_kubelet_config("kind: KubeletConfiguration\ncpuManagerPolicyOptions: [a]\n", "k.yaml");
  ASSERT_FALSE(bad_map.has_value());
  EXPECT_EQ(bad_map.error().field, "cpuManagerPolicyOptions");
}

TEST(CpuManagerState, CollectsExclusiveCpus) {
  auto s = parse_cpu_manager_state(fixture("numa-ready/cpu_manager_state"), "cpu_manager_state");
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->policy, "static");
  EXPECT_EQ(s->exclusive_cpus().to_list(), "1-5,9-13,17-21,25-29");
  EXPECT_EQ(s->default_cpu_set.to_list(), "0,6-8,14-16,22-24,30-31");
  auto none = parse_cpu_manager_state(fixture("defaults/cpu_manager_state"), "cpu_manager_state");
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_TRUE(none->exclusive_cpus().empty());
}

TEST(CpuManagerState, TruncatedOrMalformedIsAClearError) {
  auto s = parse_cpu_manager_state(fixture("broken/cpu_manager_state"), "/var/lib/kubelet/cpu_manager_state");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().message, "/var/lib/kubelet/cpu_manager_state: not a JSON object (truncated?)");
  auto bad_set = parse_cpu_manager_state(R"({"policyName":"static","entries":{"p":{"c":"1-x"}}})", "f");
  ASSERT_FALSE(bad_set.has_value());
  EXPECT_NE(bad_set.error().message.find("entries.p.c"), std::string::npos) << bad_set.error().message;
}

// A member of another type than the kubelet writes (a damaged file, or
// another kubelet's format) is an error naming the file and the member —
// never an exception out of the JSON library, which aborted the agent.
TEST(StateFiles, MembersOfTheWrongTypeAreErrorsNamingFileAndMember) {
  const std::vector<std::pair<std::string, std::string>> cpu_cases = {
      {R"({"policyName":{"a":1}})", "cpu_manager_state: policyName: want a string"},
      {R"({"policyName":7})", "cpu_manager_state: policyName: want a string"},
      {R"({"policyName":""})", "cpu_manager_state: policyName: want a policy's name, not an empty string"},
      {R"({"policyName":"static","defaultCpuSet":[1]})", "cpu_manager_state: defaultCpuSet: want a CPU list string"},
      {R"({"policyName":"static","entries":"x"})", "cpu_manager_state: entries: want an object"},
      {R"({"policyName":"static","entries":[1]})", "cpu_manager_state: entries: want an object"},
      {R"({"policyName":"static","entries":{"p":[1]}})", "cpu_manager_state: entries.p: want an object"},
      {R"({"policyName":"static","entries":{"p":{"c":3}}})", "cpu_manager_state: entries.p.c: want a CPU list string"},
  };
  for (const auto& [text, message] : cpu_cases) {
    auto s = parse_cpu_manager_state(text, "cpu_manager_state");
    ASSERT_FALSE(s.has_value()) << text;
    EXPECT_EQ(s.error().message, message) << text;
  }
  const std::string reserved = "memory_manager_state: machineState.0.memoryMap.memory.reserved: want a number of bytes";
  const std::vector<std::pair<std::string, std::string>> memory_cases = {
      {R"({"policyName":["Static"]})", "memory_manager_state: policyName: want a string"},
      {R"({"policyName":"Static","machineState":[]})", "memory_manager_state: machineState: want an object"},
      {R"({"policyName":"Static","machineState":{"0":1}})", "memory_manager_state: machineState.0: want an object"},
      {R"({"policyName":"Static","machineState":{"0":{"memoryMap":[]}}})",
       "memory_manager_state: machineState.0.memoryMap: want an object"},
      {R"({"policyName":"Static","machineState":{"0":{"memoryMap":{"memory":"x"}}}})",
       "memory_manager_state: machineState.0.memoryMap.memory: want an object"},
      {R"({"policyName":"Static","machineState":{"0":{}}})", reserved},
      {R"({"policyName":"Static","machineState":{"0":{"memoryMap":{"memory":{"reserved":-1}}}}})", reserved},
      {R"({"policyName":"Static","machineState":{"0":{"memoryMap":{"memory":{"reserved":"1"}}}}})", reserved},
  };
  for (const auto& [text, message] : memory_cases) {
    auto s = parse_memory_manager_state(text, "memory_manager_state");
    ASSERT_FALSE(s.has_value()) << text;
    EXPECT_EQ(s.error().message, message) << text;
  }
  // Node ids: decimal, whole, within range ("1abc" was read as 1, "-1" as 4294967295).
  for (const char* key : {"1abc", "-1", "", "0x1", "99999999999", " 1"}) {
    const std::string text = std::string(R"({"policyName":"Static","machineState":{")") + key +
                             R"(":{"memoryMap":{"memory":{"reserved":1}}}}})";
    auto s = parse_memory_manager_state(text, "memory_manager_state");
    ASSERT_FALSE(s.has_value()) << key;
    EXPECT_NE(s.error().message.find("want a NUMA node id"), std::string::npos) << s.error().message;
  }
}

TEST(MemoryManagerState, AssignedMemoryPerNode) {
  auto s = parse_memory_manager_state(fixture("numa-ready/memory_manager_state"), "memory_manager_state");
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->assigned_memory.at(0), 16ull << 30);
  EXPECT_EQ(s->assigned_memory.at(1), 8ull << 30);
  auto broken = parse_memory_manager_state(fixture("broken/memory_manager_state"), "memory_manager_state");
  ASSERT_FALSE(broken.has_value());
  EXPECT_NE(broken.error().message.find("machineState.0.memoryMap.memory.reserved"), std::string::npos);
}

// A real kubelet's files with a pod that ended: the Memory Manager still
// counts its 64 MiB; the pods the kubelet no longer runs are left out.
TEST(StateFiles, EntriesOfEndedPodsAreNotCounted) {
  auto cpus = parse_cpu_manager_state(fixture("ended-pod/cpu_manager_state"), "cpu_manager_state");
  auto memory = parse_memory_manager_state(fixture("ended-pod/memory_manager_state"), "memory_manager_state");
  ASSERT_TRUE(cpus.has_value()) << cpus.error().message;
  ASSERT_TRUE(memory.has_value()) << memory.error().message;
  const std::string live = "6b1c2e6f0f3d4c8a9e2d7a51c0b8e4f2", ended = "972f5e0bd745608f8e187749d864a713";
  EXPECT_EQ(cpus->pods.at(live), CpuSet{1});
  EXPECT_EQ(memory->pods.at(live).at(0), 1ull << 30);
  EXPECT_EQ(memory->pods.at(ended).at(0), 64ull << 20);
  EXPECT_EQ(memory->allocatable_memory.at(0), 25171337216ull);

  const std::optional<CpuManagerState> cpu_state = *cpus;
  const std::optional<MemoryManagerState> memory_state = *memory;
  const auto all = allocations_of_state_files("dir", cpu_state, memory_state);
  EXPECT_EQ(all.assigned.at(0).at("memory"), (1ull << 30) + (64ull << 20));
  const auto running = allocations_of_state_files("dir", cpu_state, memory_state, {ended});
  EXPECT_EQ(running.assigned.at(0).at("memory"), 1ull << 30);
  EXPECT_EQ(running.exclusive_cpus, CpuSet{1});
  EXPECT_EQ(running.allocatable_memory.at(0), 25171337216ull);
  const auto none = allocations_of_state_files("dir", cpu_state, memory_state, {live, ended});
  EXPECT_EQ(none.assigned.at(0).at("memory"), 0u);
  EXPECT_TRUE(none.exclusive_cpus.empty());

  // A block over two nodes is charged evenly; malformed entries name themselves.
  auto spread = parse_memory_manager_state(
      R"({"policyName":"Static","entries":{"p":{"c":[{"numaAffinity":[0,1],"type":"memory","size":3}]}}})", "m");
  ASSERT_TRUE(spread.has_value()) << spread.error().message;
  EXPECT_EQ(spread->pods.at("p").at(0), 2u);
  EXPECT_EQ(spread->pods.at("p").at(1), 1u);
  for (const char* bad : {R"({"policyName":"Static","entries":{"p":{"c":{}}}})",
                          R"({"policyName":"Static","entries":{"p":{"c":[{"type":"memory","size":1}]}}})",
                          R"({"policyName":"Static","entries":{"p":{"c":[{"numaAffinity":[-1],"type":"memory","size":1}]}}})"}) {
    auto s = parse_memory_manager_state(bad, "m");
    ASSERT_FALSE(s.has_value()) << bad;
    EXPECT_NE(s.error().message.find("m: entries.p.c"), std::string::npos) << s.error().message;
  }
}

}  // namespace
}  // namespace numaserve::agent::kubelet
