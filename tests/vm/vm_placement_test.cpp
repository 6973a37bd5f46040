// Runs inside a multi-NUMA VM (tests/vm/numa-vm.sh), never on the host: it
// creates cgroups and binds memory. The VM's layout comes from the harness's
// flags, passed as NUMASERVE_VM_NODES and NUMASERVE_VM_CPUS_PER_NODE, so the
// expectations do not come from the code under test. NUMASERVE_AGENT names
// the agent binary for the end-to-end case.

#include <numaif.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "numaserve/common/numa_maps.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/text_file.h"
#include "numaserve/common/topology.h"
#include "numaserve/common/topology_json.h"
#include "numa/numa.h"
#include "threads/threads.h"

namespace numaserve {
namespace {

unsigned env_unsigned(const char* name) {
  const char* value = std::getenv(name);
  return value ? static_cast<unsigned>(std::stoul(value)) : 0;
}

class InVm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("NUMA_VM_GUEST") == nullptr) GTEST_SKIP() << "only runs inside numa-vm.sh";
    nodes_ = env_unsigned("NUMASERVE_VM_NODES");
    cpus_per_node_ = env_unsigned("NUMASERVE_VM_CPUS_PER_NODE");
    ASSERT_GE(nodes_, 2u) << "set NUMASERVE_VM_NODES";
    ASSERT_GE(cpus_per_node_, 1u) << "set NUMASERVE_VM_CPUS_PER_NODE";
  }

  CpuSet cpus_of(unsigned node) const {
    return CpuSet::range(node * cpus_per_node_, (node + 1) * cpus_per_node_ - 1);
  }

  unsigned nodes_ = 0;
  unsigned cpus_per_node_ = 0;
};

void write_file(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value << std::flush;
  ASSERT_TRUE(out.good()) << "cannot write '" << value << "' to " << path << ": " << std::strerror(errno);
}

// A cgroup v2 child of the root with the given cpuset, as the kubelet makes
// for a Guaranteed pod on one NUMA node.
std::string make_cgroup(const std::string& name, const CpuSet& cpus, unsigned mem_node) {
  write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpuset");
  const std::string dir = "/sys/fs/cgroup/" + name;
  std::filesystem::create_directory(dir);
  write_file(dir + "/cpuset.cpus", cpus.to_list());
  write_file(dir + "/cpuset.mems", std::to_string(mem_node));
  return dir;
}

// Runs `body` in a forked child, moved into cgroup `cgroup_dir` first unless
// it is empty, and returns what the child wrote to its stdout. The child never
// touches gtest; it exits after `body`.
std::string in_child(const std::string& cgroup_dir, const std::function<void()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  std::fflush(stdout);  // or the child would inherit, and print, gtest's buffered output
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDOUT_FILENO);
    if (!cgroup_dir.empty()) {
      std::ofstream procs(cgroup_dir + "/cgroup.procs");
      procs << "0" << std::flush;  // "0" moves the writing process
      if (!procs.good()) {
        std::printf("cannot join %s", cgroup_dir.c_str());
        std::fflush(stdout);
        _exit(1);
      }
    }
    body();
    std::fflush(stdout);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

std::function<void()> printing(std::string (*compute)()) {
  return [compute] { std::fputs(compute().c_str(), stdout); };
}

std::string placement_summary() {
  auto p = discover_placement();
  if (!p) return "error: " + p.error().message;
  return "cpus=" + p->cpus().to_list() + " mems=" + p->mems().to_list() +
         " cgroup_v" + (p->cgroup ? std::to_string(p->cgroup->version) : "none");
}

// Maps and touches 32 MiB, then reports which nodes its pages are on, from
// the kernel's own account (/proc/self/numa_maps).
std::string allocate_and_locate() {
  constexpr std::size_t kBytes = 32u << 20;
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return std::string("mmap: ") + std::strerror(errno);
  std::memset(p, 0x5a, kBytes);  // first touch decides placement
  auto text = read_text_file("/proc/self/numa_maps");
  if (!text) return "error: " + text.error().message;
  auto maps = parse_numa_maps(*text);
  if (!maps) return "error: " + maps.error().message;
  for (const auto& m : *maps) {
    if (m.start != reinterpret_cast<std::uintptr_t>(p)) continue;
    std::string out;
    for (const auto& [node, pages] : m.pages_per_node) {
      out += "N" + std::to_string(node) + "=" + std::to_string(pages) + " ";
    }
    return out;
  }
  return "mapping not found";
}

std::string all_pages_on(unsigned node) {
  return "N" + std::to_string(node) + "=" + std::to_string((32u << 20) / 4096) + " ";
}

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

// The service's start-up order in a pod pinned to one node: plan threads from
// the cpuset, set the memory policy, pin a worker, then touch memory from it.
TEST_F(InVm, ServicePlacementKeepsWorkersAndPagesOnItsNode) {
  const unsigned node = nodes_ - 1;
  const std::string dir = make_cgroup("numaserve-service", cpus_of(node), node);
  const std::string out = in_child(dir, [] {
    auto placement = discover_placement();
    auto topology = discover_topology(TopologySource::live());
    if (!placement || !topology) return (void)std::printf("discovery failed");
    auto plan = threads::plan_threads(*placement, *topology, {});
    if (!plan) return (void)std::printf("plan: %s", plan.error().message.c_str());
    CpuSet workers;
    for (const auto& w : plan->workers) workers |= w.cpus;
    const auto policy = numa::bind_memory(plan->mems);
    std::string pages;
    std::thread worker([&] {
      if (numa::bind_current_thread(plan->workers.front().cpus)) pages = allocate_and_locate();
    });
    worker.join();
    std::printf("workers=%s mems=%s policy=%d pages=%s", workers.to_list().c_str(), plan->mems.to_list().c_str(),
                policy.applied ? 1 : 0, pages.c_str());
  });
  EXPECT_EQ(out, "workers=" + cpus_of(node).to_list() + " mems=" + std::to_string(node) +
                     " policy=1 pages=" + all_pages_on(node));
}

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
}  // namespace numaserve
