// Runs inside a multi-NUMA VM (tests/vm/numa-vm.sh), never on the host: it
// creates cgroups and binds memory. The VM's layout comes from the harness's
// flags, passed as NUMASERVE_VM_NODES and NUMASERVE_VM_CPUS_PER_NODE, so the
// expectations do not come from the code under test. NUMASERVE_AGENT names
// the agent binary for the agent's cases. The service's start-up and a
// reload in the VM: vm_startup_test.cpp.

#include <gtest/gtest.h>

#include "vm_support.h"

namespace numaserve::vm_testing {
namespace {

TEST_F(InVm, LiveTopologyHasTheVmsNodesAndCpus) {
  auto t = discover_topology(TopologySource::live());
  ASSERT_TRUE(t.has_value()) << t.error().message;
  ASSERT_EQ(t->nodes.size(), nodes_);
  for (unsigned n = 0; n < nodes_; ++n) {
    const NumaNode* node = t->node(n);
    ASSERT_NE(node, nullptr) << n;
    EXPECT_EQ(node->cpus.to_list(), cpus_of(n).to_list()) << "node " << n;
    EXPECT_EQ(node->cores.size(), cpus_per_node_) << "node " << n;
    EXPECT_GT(node->memory_bytes, 0u) << "node " << n;
    for (unsigned m = 0; m < nodes_; ++m) {
      EXPECT_EQ(t->distances->at(n, m), n == m ? 10u : 20u) << n << "->" << m;
    }
  }
  EXPECT_EQ(t->online_cpus, CpuSet::range(0, nodes_ * cpus_per_node_ - 1));
}

TEST_F(InVm, PlacementReaderSeesTheCgroupV2Cpuset) {
  for (unsigned node : {1u, nodes_ - 1}) {
    const std::string dir = make_cgroup("numaserve-node" + std::to_string(node), cpus_of(node), node);
    EXPECT_EQ(in_child(dir, printing(placement_summary)),
              "cpus=" + cpus_of(node).to_list() + " mems=" + std::to_string(node) + " cgroup_v2")
        << "node " << node;
  }
}

TEST_F(InVm, CgroupMemsPutFirstTouchedPagesOnTheNode) {
  const unsigned node = 1;
  const std::string dir = make_cgroup("numaserve-mem" + std::to_string(node), cpus_of(node), node);
  EXPECT_EQ(in_child(dir, printing(allocate_and_locate)), all_pages_on(node));
}

// The operator's view, end to end: the agent binary run inside the cgroup.
TEST_F(InVm, AgentDiscoverReportsTheCgroupItRunsIn) {
  const char* agent = std::getenv("NUMASERVE_AGENT");
  ASSERT_NE(agent, nullptr) << "set NUMASERVE_AGENT to numaserve-topology-agent";
  const unsigned node = nodes_ - 1;
  const std::string dir = make_cgroup("numaserve-agent", cpus_of(node), node);
  const std::string out = in_child(dir, [agent] {
    execl(agent, agent, "discover", "--json", static_cast<char*>(nullptr));
    std::printf("exec %s: %s", agent, std::strerror(errno));
  });
  const auto json = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << out;
  EXPECT_EQ(json["placement"]["cpus"], cpus_of(node).to_list()) << out;
  EXPECT_EQ(json["placement"]["mems"], std::to_string(node)) << out;
  EXPECT_EQ(json["placement"]["cgroup"]["version"], 2) << out;
  EXPECT_EQ(json["topology"]["nodes"].size(), nodes_) << out;
  EXPECT_EQ(json["topology"]["allowed_cpus"], cpus_of(node).to_list()) << out;
}

// The service's own start-up (startup::serve, as main.cpp runs it, with a
// fake model runtime in place of LibTorch) in a pod pinned to one node,
// asked over HTTP where it put its workers and its model's pages.
// A version loaded while the service runs (--model-repository, explicit
// mode) lands where the first did: the repository's manager thread was
// started from start-up's bound thread, so it inherits the pod's CPUs and
// memory policy. The pod is on the last node, not node 0, where unbound
// memory would land anyway.
// The agent's advice for the VM: one replica per node, zones as the VM has them.
TEST_F(InVm, AgentPlanAndNodeResourceTopologyMatchTheVm) {
  const char* agent = std::getenv("NUMASERVE_AGENT");
  ASSERT_NE(agent, nullptr) << "set NUMASERVE_AGENT to numaserve-topology-agent";
  // Small reservations: the VM's nodes have a few hundred MiB each.
  auto run_plan = [agent](const char* output) {
    return in_child({}, [agent, output] {
      execl(agent, agent, "plan", "-o", output, "--kube-reserved-memory", "32Mi", "--system-reserved-memory",
            "32Mi", "--eviction-hard-memory", "16Mi", "--node-name", "vm", static_cast<char*>(nullptr));
      std::printf("exec %s: %s", agent, std::strerror(errno));
    });
  };
  const std::string plan_text = run_plan("json");
  const auto plan = nlohmann::json::parse(plan_text, nullptr, false);
  ASSERT_FALSE(plan.is_discarded()) << plan_text;
  EXPECT_EQ(plan["pod"]["replicas_per_machine"], nodes_) << plan_text;
  EXPECT_EQ(plan["pod"]["cpus"], cpus_per_node_ - 1) << plan_text;  // one core per node is reserved
  ASSERT_EQ(plan["nodes"].size(), nodes_);
  for (unsigned n = 0; n < nodes_; ++n) {
    EXPECT_EQ(plan["nodes"][n]["cpus"], cpus_of(n).to_list());
    EXPECT_EQ(plan["nodes"][n]["reserved_cpus"], std::to_string(n * cpus_per_node_));
  }
  const std::string nrt = run_plan("nrt");
  for (unsigned n = 0; n < nodes_; ++n) {
    EXPECT_NE(nrt.find("name: \"node-" + std::to_string(n) + "\""), std::string::npos) << nrt;
  }
  EXPECT_NE(nrt.find("capacity: " + std::to_string(cpus_per_node_) + "\n"), std::string::npos) << nrt;
}

TEST_F(InVm, MembindPolicyPutsPagesOnTheNode) {
  const unsigned node = nodes_ - 1;
  EXPECT_EQ(in_child({}, [node] {
              unsigned long mask = 1ul << node;
              if (set_mempolicy(MPOL_BIND, &mask, sizeof(mask) * 8) != 0) {
                std::printf("set_mempolicy: %s", std::strerror(errno));
                return;
              }
              std::fputs(allocate_and_locate().c_str(), stdout);
            }),
            all_pages_on(node));
}


}  // namespace
}  // namespace numaserve::vm_testing
