// Runs inside a multi-NUMA VM (tests/vm/numa-vm.sh), never on the host: it
// creates cgroups and binds memory. The VM's layout comes from the harness's
// flags, passed as NUMASERVE_VM_NODES and NUMASERVE_VM_CPUS_PER_NODE, so the
// expectations do not come from the code under test. NUMASERVE_AGENT names
// the agent binary for the agent's cases. The start-up case runs the
// service's own start-up (startup::serve) with a fake, torch-free model.

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <numaif.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/model.h"
#include "features/model_spec.h"
#include "numaserve/common/log.h"
#include "numaserve/common/numa_maps.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/text_file.h"
#include "numaserve/common/topology.h"
#include "numaserve/common/topology_json.h"
#include "options/serve_options.h"
#include "startup/startup.h"

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

// In a forked child: moves it into cgroup `cgroup_dir` (nothing if empty),
// or says why not on its stdout and exits 1.
void join_cgroup_or_exit(const std::string& cgroup_dir) {
  if (cgroup_dir.empty()) return;
  std::ofstream procs(cgroup_dir + "/cgroup.procs");
  procs << "0" << std::flush;  // "0" moves the writing process
  if (procs.good()) return;
  std::printf("cannot join %s", cgroup_dir.c_str());
  std::fflush(stdout);
  _exit(1);
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
    join_cgroup_or_exit(cgroup_dir);
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

// A forked child, moved into cgroup `cgroup_dir` first, that keeps running
// while the parent talks to it: unlike in_child, the parent does not wait
// for its output. Its stdout and stderr go to `log_path`; it exits with what
// `body` returns. Killed and reaped when the handle goes, so a failed
// assertion leaves no process behind.
class RunningChild {
 public:
  RunningChild(const std::string& cgroup_dir, const std::string& log_path, const std::function<int()>& body) {
    std::fflush(stdout);  // or the child would inherit, and print, gtest's buffered output
    std::fflush(stderr);
    pid_ = fork();
    if (pid_ != 0) return;
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    join_cgroup_or_exit(cgroup_dir);
    const int code = body();
    std::fflush(stdout);
    _exit(code);
  }
  RunningChild(const RunningChild&) = delete;
  RunningChild& operator=(const RunningChild&) = delete;
  ~RunningChild() {
    if (pid_ <= 0 || status_) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  bool started() const { return pid_ > 0; }
  bool signal(int signal) const { return !status_ && kill(pid_, signal) == 0; }

  // Its wait status once it has exited; nullopt while it runs.
  std::optional<int> exit_status() {
    if (!status_ && pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
    }
    return status_;
  }

  // Its wait status, waiting at most `bound` for it to exit.
  std::optional<int> wait(std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!exit_status() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return exit_status();
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A wait status as "exit N" or "signal N".
std::string describe(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "signal " + std::to_string(WTERMSIG(wait_status));
  return "wait status " + std::to_string(wait_status);
}

std::string read_log(const std::string& path) {
  auto text = read_text_file(path);
  return text ? *text : "(no log: " + text.error().message + ")";
}

// A port nothing listens on now: the kernel's pick, released at once (the
// VM runs nothing else that could take it in between).
int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Polls GET /readyz until 200, for at most `bound`; false as soon as the
// child has exited.
bool wait_until_ready(httplib::Client& client, RunningChild& child, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline && !child.exit_status()) {
    if (const auto reply = client.Get("/readyz"); reply && reply->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Stands in for LibTorch's model: its "weights" are 8 MiB it maps and
// touches while loading, on the thread start-up has bound, as LibTorch's
// first touch does, so its pages land where start-up's memory policy puts
// them. The feature contract is the features fixture's.
class TouchedWeightsModel final : public api::Model {
 public:
  static constexpr std::size_t kWeightBytes = 8u << 20;

  static Result<std::unique_ptr<api::Model>> load(const std::filesystem::path&, const std::string& version, double) {
    const std::filesystem::path file = std::filesystem::path(NUMASERVE_FIXTURES_DIR) / "features/model.yaml";
    auto text = read_text_file(file);
    if (!text) return tl::unexpected(text.error());
    auto spec = features::parse_model_spec(*text, file.string());
    if (!spec) return tl::unexpected(spec.error());
    if (!version.empty()) spec->version = version;
    void* weights = mmap(nullptr, kWeightBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (weights == MAP_FAILED) return make_error(Error::Code::kInternal, std::string("mmap: ") + std::strerror(errno));
    std::memset(weights, 0x5a, kWeightBytes);  // first touch decides placement
    return std::unique_ptr<api::Model>(new TouchedWeightsModel(std::move(*spec), weights));
  }
  ~TouchedWeightsModel() override { munmap(weights_, kWeightBytes); }

  const features::ModelSpec& spec() const override { return spec_; }
  Result<std::vector<float>> forward(const features::Batch& batch) const override {
    return std::vector<float>(batch.rows, 0.f);
  }
  Status warm_up(std::size_t, unsigned) const override { return {}; }
  std::vector<numa::MemoryRange> weights() const override { return {{weights_, kWeightBytes}}; }
  std::size_t weight_bytes() const override { return kWeightBytes; }
  api::GraphReport graph_report() const override { return {}; }

 private:
  TouchedWeightsModel(features::ModelSpec spec, void* weights) : spec_(std::move(spec)), weights_(weights) {}
  features::ModelSpec spec_;
  void* weights_;
};

startup::Runtime fake_runtime() {
  return {TouchedWeightsModel::load, [](unsigned) {}, [] { return std::string("fake runtime (tests/vm)"); }};
}

// What both start-up tests serve with: loopback, one warm-up round, quiet logs.
serve::ServeOptions loopback_options(int port) {
  serve::ServeOptions options;
  options.http.host = "127.0.0.1";
  options.http.port = port;
  options.service.warmup_rounds = 1;
  options.log.level = LogLevel::kWarning;
  return options;
}

// SIGTERM, then the drain must end with exit 0 within 30 s.
void expect_clean_stop(RunningChild& child, const std::string& log_path) {
  ASSERT_TRUE(child.signal(SIGTERM));
  const auto status = child.wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "still running 30 s after SIGTERM; log:\n" << read_log(log_path);
  EXPECT_EQ(describe(*status), "exit 0") << "log:\n" << read_log(log_path);
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

// The service's own start-up (startup::serve, as main.cpp runs it, with a
// fake model runtime in place of LibTorch) in a pod pinned to one node,
// asked over HTTP where it put its workers and its model's pages.
TEST_F(InVm, StartUpKeepsWorkersAndPagesOnTheNode) {
  const unsigned node = nodes_ - 1;
  const CpuSet node_cpus = cpus_of(node);
  const std::string dir = make_cgroup("numaserve-service", node_cpus, node);
  const int port = free_loopback_port();
  ASSERT_GT(port, 0) << "no free port on 127.0.0.1";
  serve::ServeOptions options = loopback_options(port);
  options.model_dirs = {"touched-weights"};  // the fake runtime loads no file from it
  const std::string log_path = "/tmp/numaserve-startup.log";
  RunningChild child(dir, log_path, [&options] { return startup::serve(options, "vm-test", fake_runtime()); });
  ASSERT_TRUE(child.started()) << "fork failed";

  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  client.set_read_timeout(10);
  const auto ready = wait_until_ready(client, child, std::chrono::seconds(60));
  ASSERT_TRUE(ready) << (child.exit_status() ? "exited before ready: " + describe(*child.exit_status())
                                              : std::string("not ready within 60 s"))
                     << "; log:\n" << read_log(log_path);

  const auto reply = client.Get("/placement");
  ASSERT_TRUE(reply) << "GET /placement: " << httplib::to_string(reply.error());
  ASSERT_EQ(reply->status, 200) << reply->body;
  const auto placement = nlohmann::json::parse(reply->body, nullptr, false);
  ASSERT_FALSE(placement.is_discarded()) << reply->body;
  const std::string& body = reply->body;
  EXPECT_EQ(placement["cpus"], node_cpus.to_list()) << body;
  EXPECT_EQ(placement["mems"], std::to_string(node)) << body;
  EXPECT_EQ(placement["numa_nodes"], std::to_string(node)) << body;
  EXPECT_EQ(placement["memory_policy"]["bind"], true) << body;
  EXPECT_EQ(placement["memory_policy"]["nodes"], std::to_string(node)) << body;

  ASSERT_FALSE(placement["workers"].empty()) << body;
  CpuSet worker_cpus;
  for (const auto& w : placement["workers"]) worker_cpus |= CpuSet::parse_list(w["cpus"].get<std::string>()).value();
  EXPECT_EQ(worker_cpus.to_list(), node_cpus.to_list()) << body;
  std::size_t worker_threads = 0;
  for (const auto& t : placement["threads"]) {
    if (t["name"].get<std::string>().rfind("ns-worker", 0) != 0) continue;
    ++worker_threads;
    const auto allowed = CpuSet::parse_list(t["allowed_cpus"].get<std::string>());
    ASSERT_TRUE(allowed.has_value()) << t.dump();
    EXPECT_TRUE(allowed->is_subset_of(node_cpus)) << t.dump() << " is not only on " << node_cpus.to_list();
  }
  EXPECT_EQ(worker_threads, placement["workers"].size()) << body;

  ASSERT_EQ(placement["models"].size(), 1u) << body;
  const auto& model = placement["models"][0];
  EXPECT_EQ(model["weight_bytes"], TouchedWeightsModel::kWeightBytes) << body;
  EXPECT_EQ(model["pages_per_node"].size(), 1u) << body;
  EXPECT_TRUE(model["pages_per_node"].contains(std::to_string(node))) << body;
  EXPECT_GE(model["local_fraction"].get<double>(), 0.99) << body;

  expect_clean_stop(child, log_path);
}

// A version loaded while the service runs (--model-repository, explicit
// mode) lands where the first did: the repository's manager thread was
// started from start-up's bound thread, so it inherits the pod's CPUs and
// memory policy. The pod is on the last node, not node 0, where unbound
// memory would land anyway.
TEST_F(InVm, AReloadedVersionsPagesAreOnThePodsNode) {
  const unsigned node = nodes_ - 1;
  const std::string dir = make_cgroup("numaserve-reload", cpus_of(node), node);
  const int port = free_loopback_port(), admin = free_loopback_port();
  ASSERT_GT(port, 0);
  ASSERT_GT(admin, 0);
  const std::filesystem::path repo = "/tmp/numaserve-vm-repository";
  std::filesystem::remove_all(repo);
  for (const char* version : {"1", "2"}) {
    const auto v = repo / "tiny_ranker" / version;  // the fixture model.yaml's name
    std::filesystem::create_directories(v);
    std::filesystem::copy_file(std::filesystem::path(NUMASERVE_FIXTURES_DIR) / "features/model.yaml", v / "model.yaml");
    std::ofstream(v / "model.pt") << "the fake runtime reads no weights";
    std::ofstream(v / "COMPLETE");
  }
  std::ofstream(repo / "tiny_ranker" / "config.yaml") << "version_policy: {specific: [1]}\n";
  serve::ServeOptions options = loopback_options(port);
  options.reload.repository = repo.string();
  options.reload.control_mode = reload::ControlMode::kExplicit;
  options.http.admin_port = admin;
  const std::string log_path = "/tmp/numaserve-reload.log";
  RunningChild child(dir, log_path, [&options] { return startup::serve(options, "vm-test", fake_runtime()); });
  ASSERT_TRUE(child.started()) << "fork failed";
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  client.set_read_timeout(10);
  ASSERT_TRUE(wait_until_ready(client, child, std::chrono::seconds(60))) << "log:\n" << read_log(log_path);

  httplib::Client control("127.0.0.1", admin);
  control.set_read_timeout(30);
  std::ofstream(repo / "tiny_ranker" / "config.yaml") << "version_policy: {specific: [2]}\n";
  const auto loaded = control.Post("/v2/repository/models/tiny_ranker/load", "", "application/json");
  ASSERT_TRUE(loaded) << httplib::to_string(loaded.error());
  ASSERT_EQ(loaded->status, 200) << loaded->body << "\nlog:\n" << read_log(log_path);

  const auto reply = control.Get("/placement");
  ASSERT_TRUE(reply && reply->status == 200);
  const auto placement = nlohmann::json::parse(reply->body, nullptr, false);
  ASSERT_EQ(placement["models"].size(), 1u) << reply->body;  // version 1 unloaded
  const auto& model = placement["models"][0];
  EXPECT_EQ(model["version"], "2") << reply->body;
  EXPECT_EQ(model["pages_per_node"].size(), 1u) << reply->body;
  EXPECT_TRUE(model["pages_per_node"].contains(std::to_string(node))) << reply->body;
  EXPECT_GE(model["local_fraction"].get<double>(), 0.99) << reply->body;

  expect_clean_stop(child, log_path);
  std::filesystem::remove_all(repo);
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
