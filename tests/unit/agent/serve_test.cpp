#include "http/http.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "numaserve/common/text_file.h"
#include "serve/metrics.h"
#include "updater/triggers.h"
#include "updater/updater.h"

namespace numaserve::agent {
namespace {

updater::UpdaterConfig config_in(const std::filesystem::path& hints) {
  updater::UpdaterConfig config;
  config.discover = discover::DiscoverConfig::of(TopologySource::synthetic("pack:2 numa:1(memory=32GiB) core:8 pu:2"));
  config.node_name = "worker-3";
  config.hints_dir = hints;
  return config;
}

class Agent : public ::testing::Test {
 protected:
  void SetUp() override {
    hints_ = std::filesystem::temp_directory_path() / ("numaserve-agent-" + std::to_string(::getpid()));
    std::filesystem::remove_all(hints_);
  }
  void TearDown() override { std::filesystem::remove_all(hints_); }
  std::filesystem::path hints_;
};

TEST_F(Agent, CycleWritesEveryHintOnceAndCountsChanges) {
  updater::Updater agent(config_in(hints_));
  const auto first = agent.run_cycle();
  ASSERT_TRUE(first.ok()) << ::testing::PrintToString(first.errors);
  for (const char* name : {"topology.json", "plan.json", "kubelet-config.yaml", "helm-values.yaml",
                           "noderesourcetopology.yaml", "node.svg"}) {
    EXPECT_TRUE(std::filesystem::exists(hints_ / name)) << name;
  }
  EXPECT_NE(read_text_file(hints_ / "noderesourcetopology.yaml")->find("name: \"worker-3\""), std::string::npos);
  EXPECT_EQ(agent.counters().files_changed, 6u);
  ASSERT_TRUE(agent.run_cycle().ok());
  EXPECT_EQ(agent.counters().files_changed, 6u);  // nothing changed, nothing rewritten
  EXPECT_EQ(agent.counters().cycles, 2u);
  EXPECT_GT(agent.counters().last_success_unix_seconds, 0);
}

TEST_F(Agent, NoPublishWritesNothing) {
  auto config = config_in(hints_);
  config.publish = false;
  updater::Updater agent(config);
  ASSERT_TRUE(agent.run_cycle().ok());
  EXPECT_FALSE(std::filesystem::exists(hints_));
}

TEST_F(Agent, KubeletDropinIsOptIn) {
  auto config = config_in(hints_);
  config.kubelet_dropin_dir = hints_ / "kubelet.conf.d";
  updater::Updater agent(config);
  ASSERT_TRUE(agent.run_cycle().ok());
  const auto dropin = read_text_file(hints_ / "kubelet.conf.d" / updater::kKubeletDropinName);
  ASSERT_TRUE(dropin.has_value());
  EXPECT_NE(dropin->find("kind: KubeletConfiguration"), std::string::npos);
}

TEST_F(Agent, PublishFailureIsCountedAndTheLoopKeepsItsResults) {
  auto config = config_in("/proc/numaserve-cannot-write-here");
  updater::Updater agent(config);
  const auto result = agent.run_cycle();
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(result.report.has_value());
  EXPECT_TRUE(result.plan.has_value());
  EXPECT_EQ(agent.counters().failures.at("publish"), 1u);
  const std::string metrics = serve::render_metrics(result, agent.counters());
  EXPECT_NE(metrics.find("numaserve_agent_failures_total{stage=\"publish\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("numaserve_plan_replica_cpus 14"), std::string::npos) << metrics;
}

// A state file the agent cannot parse (here one whose policyName is an
// object, which aborted the agent) is an error of the cycle, counted, named
// with the file and the member; the topology and the NodeResourceTopology
// are published all the same, and so is every cycle after it.
TEST_F(Agent, DamagedKubeletStateFileIsCountedAndTheRestPublished) {
  const auto state = hints_.parent_path() / ("numaserve-kubelet-" + std::to_string(::getpid()));
  std::filesystem::create_directories(state);
  {
    std::ofstream(state / "cpu_manager_state") << R"({"policyName":{"a":"7-21"},"checksum":1})";
  }
  auto config = config_in(hints_);
  config.discover.kubelet_state_dir = state;
  updater::Updater agent(config);
  for (int cycle = 1; cycle <= 2; ++cycle) {
    const auto result = agent.run_cycle();
    ASSERT_EQ(result.errors.size(), 1u) << ::testing::PrintToString(result.errors);
    EXPECT_EQ(result.errors[0], "kubelet_files: " + (state / "cpu_manager_state").string() + ": policyName: want a string");
    EXPECT_TRUE(result.plan.has_value());
    EXPECT_EQ(agent.counters().failures.at("kubelet_files"), static_cast<std::uint64_t>(cycle));
    const std::string metrics = serve::render_metrics(result, agent.counters());
    EXPECT_NE(metrics.find("numaserve_agent_failures_total{stage=\"kubelet_files\"} " + std::to_string(cycle)),
              std::string::npos)
        << metrics;
  }
  EXPECT_NE(read_text_file(hints_ / "noderesourcetopology.yaml")->find("name: \"worker-3\""), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(hints_ / "topology.json"));
  // An absent state file (the kubelet's manager is off) is no failure.
  std::filesystem::remove(state / "cpu_manager_state");
  EXPECT_TRUE(agent.run_cycle().ok());
  EXPECT_EQ(agent.counters().failures.at("kubelet_files"), 2u);
  std::filesystem::remove_all(state);
}

TEST_F(Agent, DiscoveryFailureIsCountedNotFatal) {
  auto config = config_in(hints_);
  config.discover = discover::DiscoverConfig::of(TopologySource::xml("/no/such.xml"));
  updater::Updater agent(config);
  const auto result = agent.run_cycle();
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_NE(result.errors[0].find("discover: "), std::string::npos);
  EXPECT_EQ(agent.counters().failures.at("discover"), 1u);
}

TEST_F(Agent, HttpEndpointServesEachRoute) {
  http::StatusServer server;
  ASSERT_TRUE(server.start("127.0.0.1", 0).has_value());
  httplib::Client client("127.0.0.1", server.port());

  auto before = client.Get("/healthz");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 200);  // nothing published yet is not a failure
  auto no_topology = client.Get("/topology");
  ASSERT_TRUE(no_topology);
  EXPECT_EQ(no_topology->status, 503);

  updater::Updater agent(config_in(hints_));
  const auto result = agent.run_cycle();
  server.publish(serve::snapshot_of(result, agent.counters()));

  auto topology = client.Get("/topology");
  ASSERT_TRUE(topology);
  EXPECT_EQ(topology->status, 200);
  EXPECT_EQ(nlohmann::json::parse(topology->body)["topology"]["nodes"].size(), 2u);
  auto plan = client.Get("/plan");
  ASSERT_TRUE(plan);
  EXPECT_EQ(nlohmann::json::parse(plan->body)["pod"]["cpus"], 14);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  EXPECT_NE(metrics->body.find("numaserve_node_cpus{numa_node=\"1\"} 16"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("# TYPE numaserve_agent_cycles_total counter"), std::string::npos);
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["error"], "no route GET /nope");

  server.publish({"", "", "", "discover: hwloc could not load"});
  auto unhealthy = client.Get("/healthz");
  ASSERT_TRUE(unhealthy);
  EXPECT_EQ(unhealthy->status, 503);
  server.stop();
}

TEST(StatusServer, PortInUseIsAClearError) {
  http::StatusServer first, second;
  ASSERT_TRUE(first.start("127.0.0.1", 0).has_value());
  auto taken = second.start("127.0.0.1", first.port());
  ASSERT_FALSE(taken.has_value());
  EXPECT_NE(taken.error().message.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
            std::string::npos);
}

// Rendering decides what a cycle publishes without touching anything.
TEST(Render, WithoutAPlanThePlansFilesAreStaleAndTheNrtStillGoesOut) {
  auto config = config_in("/nonexistent");
  config.apiserver = apiserver::ApiServerConfig{};
  config.kubelet_dropin_dir = "/nonexistent/kubelet.conf.d";
  updater::CycleResult result;
  result.report = *discover::discover_node(config.discover);
  const auto rendered = updater::render(config, result);
  EXPECT_FALSE(rendered.stale_hints.empty());
  for (const auto& hint : rendered.hints) EXPECT_NE(hint.name, "plan.json");
  EXPECT_TRUE(rendered.node_resource_topology.has_value());
  EXPECT_TRUE(rendered.labels.has_value());
  EXPECT_FALSE(rendered.kubelet_dropin.has_value());  // the drop-in needs a plan
}

// The loop's triggers. Signals go to this thread alone, with the mask put
// back afterwards, so no other test sees them. (These belong in an
// updater_test.cpp once tests/CMakeLists.txt lists one.)
class Triggers : public ::testing::Test {
 protected:
  void SetUp() override {
    pthread_sigmask(SIG_SETMASK, nullptr, &saved_);
    updater::block_signals();
    dir_ = std::filesystem::temp_directory_path() / ("numaserve-triggers-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  void touch(const std::string& name) const { std::ofstream(dir_ / name) << "x"; }

  sigset_t saved_;
  std::filesystem::path dir_;
};

TEST_F(Triggers, SighupRunsACycleAndSigtermStops) {
  auto triggers = updater::Triggers::open({std::chrono::hours(1), 1, {}});
  ASSERT_TRUE(triggers) << triggers.error().message;
  pthread_kill(pthread_self(), SIGHUP);
  auto next = triggers->next();
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->kind, updater::Trigger::Kind::kSignal);
  EXPECT_EQ(next->reason, "SIGHUP");
  pthread_kill(pthread_self(), SIGTERM);
  next = triggers->next();
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->kind, updater::Trigger::Kind::kStop);
  EXPECT_EQ(next->reason, "SIGTERM");
}

TEST_F(Triggers, AWatchedFileRunsACycleOtherFilesWaitForTheInterval) {
  const updater::LoopConfig config{std::chrono::duration<double>(0.3), 1000, {{dir_, {"cpu_manager_state"}}}};
  auto triggers = updater::Triggers::open(config);
  ASSERT_TRUE(triggers) << triggers.error().message;
  touch("unrelated");
  touch("cpu_manager_state");
  auto next = triggers->next();
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->kind, updater::Trigger::Kind::kFileChanged);
  EXPECT_EQ(next->reason, "changed " + (dir_ / "cpu_manager_state").string());

  touch("unrelated");
  const auto waited_from = std::chrono::steady_clock::now();
  next = triggers->next();
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->kind, updater::Trigger::Kind::kInterval);
  EXPECT_EQ(next->reason, "interval");
  EXPECT_GE(std::chrono::steady_clock::now() - waited_from, std::chrono::milliseconds(250));
}

}  // namespace
}  // namespace numaserve::agent
