// The agent against a kubelet stand-in: a real gRPC server implementing the
// PodResourcesLister service on a unix socket in a temp dir, scripted per
// case. What each case checks is what the scheduler reads: the NRT zones.

#include "podresources/podresources.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <thread>

#include "discover/discover.h"
#include "fixture_paths.h"
#include "plan/plan.h"
#include "podresources.grpc.pb.h"
#include "publish/nrt.h"
#include "report/report.h"
#include "report/svg.h"
#include "updater/updater.h"

namespace numaserve::agent {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kGi = 1ull << 30;

// The kubelet's side: answers from the current script.
class Kubelet final : public v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    stall();
    std::lock_guard lock(mutex_);
    *response = list;
    return grpc::Status::OK;
  }
  grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                       v1::AllocatableResourcesResponse* response) override {
    stall();
    std::lock_guard lock(mutex_);
    *response = allocatable;
    return grpc::Status::OK;
  }
  void set_stall(std::chrono::milliseconds d) {
    std::lock_guard lock(mutex_);
    stall_ = d;
  }

  v1::AllocatableResourcesResponse allocatable;
  v1::ListPodResourcesResponse list;

 private:
  void stall() {
    std::chrono::milliseconds d;
    {
      std::lock_guard lock(mutex_);
      d = stall_;
    }
    std::this_thread::sleep_for(d);
  }
  std::mutex mutex_;
  std::chrono::milliseconds stall_{0};
};

void add_memory(google::protobuf::RepeatedPtrField<v1::ContainerMemory>* blocks, const std::string& type,
                std::uint64_t bytes, std::initializer_list<int> nodes) {
  auto* m = blocks->Add();
  m->set_memory_type(type);
  m->set_size(bytes);
  for (int n : nodes) m->mutable_topology()->add_nodes()->set_id(n);
}

v1::ContainerResources* add_pod(v1::ListPodResourcesResponse& list, const std::string& ns, const std::string& name) {
  auto* pod = list.add_pod_resources();
  pod->set_namespace_(ns);
  pod->set_name(name);
  auto* container = pod->add_containers();
  container->set_name("main");
  return container;
}

// 24em64t-2n6c2t-pci: two nodes of 6 SMT cores; node 0 holds the even CPUs,
// node 1 the odd. Node 0 gets 1024 hugepages of 2 MiB in the copy made here.
class PodResources : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("numaserve-podresources-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ifstream in(testing::fixtures_dir() / "topologies/xml/24em64t-2n6c2t-pci.xml");
    std::string xml((std::istreambuf_iterator<char>(in)), {});
    const std::string pool = "<page_type size=\"2097152\" count=\"0\"/>";
    xml.replace(xml.find(pool), pool.size(), "<page_type size=\"2097152\" count=\"1024\"/>");
    std::ofstream(dir_ / "machine.xml") << xml;

    // What a kubelet configured as the plan advises offers: all but CPUs 0,12
    // and 1,13, and per node its memory and hugepages.
    for (int cpu = 0; cpu < 24; ++cpu) {
      if (cpu != 0 && cpu != 12 && cpu != 1 && cpu != 13) kubelet_.allocatable.add_cpu_ids(cpu);
    }
    add_memory(kubelet_.allocatable.mutable_memory(), "memory", 16 * kGi, {0});
    add_memory(kubelet_.allocatable.mutable_memory(), "memory", 16 * kGi, {1});
    add_memory(kubelet_.allocatable.mutable_memory(), "hugepages-2Mi", 2 * kGi, {0});

    socket_ = dir_ / "kubelet.sock";
    start_kubelet();
    ASSERT_NE(server_, nullptr);
  }
  // The kubelet's PodResources server on its socket; stop_kubelet() as a
  // kubelet restarting leaves it: the server gone and its socket file too.
  void start_kubelet() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_.string(), grpc::InsecureServerCredentials());
    builder.RegisterService(&kubelet_);
    server_ = builder.BuildAndStart();
  }
  void stop_kubelet() {
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_.reset();
    std::filesystem::remove(socket_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
    std::filesystem::remove_all(dir_);
  }

  discover::DiscoverConfig config() const {
    discover::DiscoverConfig c;
    c.source = TopologySource::xml((dir_ / "machine.xml").string());
    c.podresources = podresources::ClientConfig{};
    c.podresources->socket = socket_;
    c.podresources->deadline = 200ms;
    c.podresources->attempts = 2;
    c.podresources->backoff = 10ms;
    return c;
  }

  // An agent (publishing nothing) whose first cycle read one pod, fresh.
  updater::Updater agent_that_saw_one_pod() {
    add_pod(kubelet_.list, "ranking", "numaserve-0")->add_cpu_ids(6);
    updater::UpdaterConfig c;
    c.discover = config();
    c.publish = false;
    updater::Updater agent(c);
    const auto first = agent.run_cycle();
    EXPECT_TRUE(first.report && first.report->allocations && !first.report->allocations->stale);
    return agent;
  }
  discover::NodeReport discover() const {
    auto report = discover::discover_node(config());
    EXPECT_TRUE(report.has_value()) << report.error().message;
    return report.value_or(discover::NodeReport{});
  }

  // zone -> resource -> {capacity, allocatable, available}
  static std::map<std::string, std::map<std::string, std::array<std::uint64_t, 3>>> zones(
      const nlohmann::json& nrt) {
    std::map<std::string, std::map<std::string, std::array<std::uint64_t, 3>>> out;
    for (const auto& zone : nrt["zones"]) {
      for (const auto& r : zone["resources"]) {
        out[zone["name"]][r["name"]] = {r["capacity"].get<std::uint64_t>(), r["allocatable"].get<std::uint64_t>(),
                                        r["available"].get<std::uint64_t>()};
      }
    }
    return out;
  }

  static std::string attribute(const nlohmann::json& nrt, const std::string& name) {
    for (const auto& a : nrt.value("attributes", nlohmann::json::array())) {
      if (a["name"] == name) return a["value"];
    }
    return "";
  }

  std::filesystem::path dir_;
  std::filesystem::path socket_;
  Kubelet kubelet_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(PodResources, NoPodsLeavesAllTheKubeletsAllocatableAvailable) {
  const auto report = discover();
  ASSERT_TRUE(report.allocations.has_value());
  EXPECT_TRUE(report.warnings.empty()) << ::testing::PrintToString(report.warnings);
  const auto z = zones(publish::make_node_resource_topology("w", report, nullptr));
  EXPECT_EQ(z.at("node-0").at("cpu"), (std::array<std::uint64_t, 3>{12, 10, 10}));
  EXPECT_EQ(z.at("node-1").at("cpu"), (std::array<std::uint64_t, 3>{12, 10, 10}));
  EXPECT_EQ(z.at("node-0").at("memory")[1], 16 * kGi);
  EXPECT_EQ(z.at("node-0").at("memory")[2], 16 * kGi);
  EXPECT_EQ(z.at("node-0").at("hugepages-2Mi"), (std::array<std::uint64_t, 3>{2 * kGi, 2 * kGi, 2 * kGi}));
  EXPECT_EQ(z.at("node-1").at("hugepages-2Mi")[1], 0u);
}

TEST_F(PodResources, AGuaranteedPodOnNodeOneLowersOnlyNodeOne) {
  auto* c = add_pod(kubelet_.list, "ranking", "numaserve-1");
  for (int cpu : {3, 15, 5, 17}) c->add_cpu_ids(cpu);
  add_memory(c->mutable_memory(), "memory", 4 * kGi, {1});
  const auto report = discover();
  const auto z = zones(publish::make_node_resource_topology("w", report, nullptr));
  EXPECT_EQ(z.at("node-1").at("cpu")[2], 6u);
  EXPECT_EQ(z.at("node-1").at("memory")[2], 12 * kGi);
  EXPECT_EQ(z.at("node-0").at("cpu")[2], 10u);
  EXPECT_EQ(z.at("node-0").at("memory")[2], 16 * kGi);
  ASSERT_EQ(report.allocations->pods.size(), 1u);
  const auto shown = nlohmann::json(report)["allocations"]["nodes"][1]["held_by"];
  ASSERT_EQ(shown.size(), 1u) << shown.dump();
  EXPECT_EQ(shown[0]["pod"], "ranking/numaserve-1");
  EXPECT_EQ(shown[0]["cpus"], "3,5,15,17");
  // The picture and the text say who holds what.
  const std::string svg = report::render_svg(report, std::nullopt);
  EXPECT_NE(svg.find("core 3,15, held by pod ranking/numaserve-1"), std::string::npos);
  EXPECT_EQ(svg.find("core 7,19, held by"), std::string::npos);
  EXPECT_NE(report::render_text(report).find("    ranking/numaserve-1 (main): CPUs 3,5,15,17\n"), std::string::npos)
      << report::render_text(report);
}

TEST_F(PodResources, ABurstablePodHoldsNothingAndCountsOnlyForTheAllMethod) {
  add_pod(kubelet_.list, "web", "frontend-7d9");  // no exclusive CPUs, no pinned memory
  const auto report = discover();
  const auto z = zones(publish::make_node_resource_topology("w", report, nullptr));
  EXPECT_EQ(z.at("node-0").at("cpu")[2], 10u);
  EXPECT_EQ(z.at("node-1").at("cpu")[2], 10u);
  const auto exclusive = publish::make_node_resource_topology("w", report, nullptr);
  const auto all = publish::make_node_resource_topology("w", report, nullptr, publish::FingerprintMethod::kAll);
  EXPECT_EQ(attribute(exclusive, "nodeTopologyPodsFingerprint"), publish::pod_fingerprint({}));
  EXPECT_EQ(attribute(all, "nodeTopologyPodsFingerprint"), publish::pod_fingerprint({{"web", "frontend-7d9"}}));
  EXPECT_EQ(attribute(all, "nodeTopologyPodsFingerprintMethod"), "all");
  EXPECT_EQ(attribute(exclusive, "nodeTopologyPodsFingerprintMethod"), "with-exclusive-resources");
}

TEST_F(PodResources, MemorySpreadOverTwoNodesIsChargedEvenly) {
  auto* c = add_pod(kubelet_.list, "batch", "wide");
  c->add_cpu_ids(2);
  c->add_cpu_ids(14);
  add_memory(c->mutable_memory(), "memory", 6 * kGi, {0, 1});
  const auto z = zones(publish::make_node_resource_topology("w", discover(), nullptr));
  EXPECT_EQ(z.at("node-0").at("memory")[2], 13 * kGi);
  EXPECT_EQ(z.at("node-1").at("memory")[2], 13 * kGi);
}

TEST_F(PodResources, HugepagesAreTheirOwnResource) {
  auto* c = add_pod(kubelet_.list, "dpdk", "router");
  c->add_cpu_ids(4);
  c->add_cpu_ids(16);
  add_memory(c->mutable_memory(), "hugepages-2Mi", 512ull << 20, {0});
  const auto z = zones(publish::make_node_resource_topology("w", discover(), nullptr));
  EXPECT_EQ(z.at("node-0").at("hugepages-2Mi")[2], 2 * kGi - (512ull << 20));
  EXPECT_EQ(z.at("node-0").at("memory")[2], 16 * kGi);
}

TEST_F(PodResources, AFingerprintChangesWhenAGuaranteedPodComesOrGoes) {
  const auto before = attribute(publish::make_node_resource_topology("w", discover(), nullptr), "nodeTopologyPodsFingerprint");
  EXPECT_TRUE(before.starts_with("pfp0v001")) << before;
  add_pod(kubelet_.list, "ranking", "numaserve-0")->add_cpu_ids(6);
  const auto with = attribute(publish::make_node_resource_topology("w", discover(), nullptr), "nodeTopologyPodsFingerprint");
  EXPECT_NE(with, before);
  kubelet_.list.clear_pod_resources();
  EXPECT_EQ(attribute(publish::make_node_resource_topology("w", discover(), nullptr), "nodeTopologyPodsFingerprint"),
            before);
}

TEST_F(PodResources, CpusAndNodesNotOnThisMachineAreNamedAndLeftOut) {
  auto* c = add_pod(kubelet_.list, "ranking", "odd");
  c->add_cpu_ids(3);
  c->add_cpu_ids(99);
  add_memory(c->mutable_memory(), "memory", kGi, {1, 7});
  const auto report = discover();
  ASSERT_EQ(report.warnings.size(), 2u) << ::testing::PrintToString(report.warnings);
  EXPECT_NE(report.warnings[0].find("pod ranking/odd container main holds CPU(s) 99"), std::string::npos)
      << report.warnings[0];
  EXPECT_NE(report.warnings[1].find("NUMA node(s) 7"), std::string::npos) << report.warnings[1];
  const auto z = zones(publish::make_node_resource_topology("w", report, nullptr));
  EXPECT_EQ(z.at("node-1").at("cpu")[2], 9u);
  EXPECT_EQ(z.at("node-1").at("memory")[2], 15 * kGi);
  EXPECT_EQ(z.size(), 2u);
}

TEST_F(PodResources, AStalledKubeletFailsTheCallInTimeAndTheLastGoodViewIsKept) {
  updater::Updater agent = agent_that_saw_one_pod();

  kubelet_.set_stall(600ms);  // past the 200 ms deadline, on both attempts
  const auto started = std::chrono::steady_clock::now();
  const auto second = agent.run_cycle();
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_LT(took, 2s);  // 2 attempts x 200 ms + 10 ms backoff, generously bounded
  ASSERT_TRUE(second.report.has_value());
  ASSERT_TRUE(second.report->allocations.has_value());
  EXPECT_TRUE(second.report->allocations->stale);
  EXPECT_EQ(second.report->allocations->pods.size(), 1u);
  EXPECT_EQ(agent.counters().failures.at("podresources"), 1u);
  EXPECT_EQ(agent.counters().podresources_retries, 1u);
  EXPECT_NE(second.report->warnings.front().find("no answer within 200 ms"), std::string::npos)
      << second.report->warnings.front();
  EXPECT_TRUE(second.plan.has_value());  // the cycle went on

  kubelet_.set_stall(0ms);
  const auto third = agent.run_cycle();
  ASSERT_TRUE(third.report->allocations.has_value());
  EXPECT_FALSE(third.report->allocations->stale);
}

// A kubelet restart: its socket gone for a while, pods changed meanwhile,
// then a new server on the same path. The agent keeps publishing the last
// good view marked stale while it cannot ask, and the new pods as soon as
// it can again, without being restarted itself.
TEST_F(PodResources, AKubeletRestartKeepsTheLastGoodViewUntilTheSocketIsBack) {
  updater::Updater agent = agent_that_saw_one_pod();

  stop_kubelet();
  add_pod(kubelet_.list, "ranking", "numaserve-1")->add_cpu_ids(8);  // while it was away
  for (int cycle = 0; cycle < 3; ++cycle) {
    const auto started = std::chrono::steady_clock::now();
    const auto down = agent.run_cycle();
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
    ASSERT_TRUE(down.report && down.report->allocations) << "cycle " << cycle;
    EXPECT_TRUE(down.report->allocations->stale);
    EXPECT_EQ(down.report->allocations->pods.size(), 1u);  // what it knew
    EXPECT_TRUE(down.plan.has_value());
  }
  EXPECT_EQ(agent.counters().failures.at("podresources"), 3u);

  start_kubelet();
  ASSERT_NE(server_, nullptr);
  const auto after = agent.run_cycle();
  ASSERT_TRUE(after.report && after.report->allocations);
  EXPECT_FALSE(after.report->allocations->stale);
  EXPECT_EQ(after.report->allocations->pods.size(), 2u);
  EXPECT_EQ(agent.counters().failures.at("podresources"), 3u);  // recovered: no new failure
}

TEST_F(PodResources, WithoutTheSocketTheStateFilesAreReadWithAWarning) {
  auto c = config();
  c.podresources->socket = dir_ / "absent.sock";
  c.kubelet_state_dir = testing::fixtures_dir() / "kubelet/numa-ready";
  auto report = discover::discover_node(c);
  ASSERT_TRUE(report.has_value());
  ASSERT_TRUE(report->allocations.has_value());
  EXPECT_FALSE(report->allocations->allocatable.has_value());
  ASSERT_FALSE(report->warnings.empty());
  EXPECT_NE(report->warnings.front().find("no PodResources socket at " + (dir_ / "absent.sock").string()),
            std::string::npos)
      << report->warnings.front();
  // Without pod names there is no fingerprint to publish.
  const auto nrt = publish::make_node_resource_topology("w", *report, nullptr);
  EXPECT_EQ(attribute(nrt, "nodeTopologyPodsFingerprint"), "");
}

// --- The fingerprint against the scheduler plugins' own vectors ---

std::vector<publish::PodName> pods_of(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<publish::PodName> pods;
  std::string ns, name, rest;
  while (in >> ns >> name) {
    std::getline(in, rest);
    pods.push_back({ns, name});
  }
  return pods;
}

TEST(PodFingerprint, MatchesEveryVectorOfTheSchedulerPlugins) {
  unsigned checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::fixtures_dir() / "podfingerprint")) {
    if (entry.path().extension() != ".txt") continue;
    std::ifstream sign(std::filesystem::path(entry.path()).replace_extension(".sign"));
    std::string expected;
    sign >> expected;
    auto pods = pods_of(entry.path());
    ASSERT_FALSE(pods.empty()) << entry.path();
    EXPECT_EQ(publish::pod_fingerprint(pods), expected) << entry.path();
    std::reverse(pods.begin(), pods.end());  // the order of the list does not matter
    EXPECT_EQ(publish::pod_fingerprint(pods), expected) << entry.path();
    ++checked;
  }
  EXPECT_EQ(checked, 3u);
}

}  // namespace
}  // namespace numaserve::agent
