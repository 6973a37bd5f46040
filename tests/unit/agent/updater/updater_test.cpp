// The agent's cycle (discover -> plan -> render -> publish), its failures
// counted and the loop kept, and the triggers that start each cycle.
#include "updater/updater.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "agent_node.h"
#include "fixture_paths.h"
#include "numaserve/common/text_file.h"
#include "serve/metrics.h"
#include "updater/triggers.h"

namespace numaserve::agent {
namespace {

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

// A kubelet state file rewritten in place (truncated, then written in two
// pieces) while the agent reads it, as a writer that does not rename would
// leave it: each cycle reads it whole or names it as that cycle's error,
// none stops the loop or goes without a plan, and once the writes stop the
// next cycle reads it whole again.
TEST_F(Agent, AStateFileRewrittenWhileReadIsReadWholeOrNamedAndReadAgainAfter) {
  const auto state = hints_.parent_path() / "kubelet";
  std::filesystem::create_directories(state);
  const auto file = state / "cpu_manager_state";
  const std::string content = read_text_file(testing::fixtures_dir() / "kubelet/numa-ready/cpu_manager_state").value();
  std::ofstream(file) << content;
  auto config = config_in(hints_);
  config.discover.kubelet_state_dir = state;
  updater::Updater agent(config);
  std::atomic<bool> stop{false};
  std::thread kubelet([&] {
    while (!stop) {
      std::ofstream out(file, std::ios::trunc);
      out << content.substr(0, content.size() / 2) << std::flush;
      out << content.substr(content.size() / 2);
    }
  });
  int whole = 0, named = 0;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1); std::chrono::steady_clock::now() < until;) {
    const auto result = agent.run_cycle();
    EXPECT_TRUE(result.plan.has_value());
    if (result.errors.empty()) {
      EXPECT_TRUE(result.report && result.report->cpu_manager_state);
      ++whole;
    } else {
      ASSERT_EQ(result.errors.size(), 1u) << ::testing::PrintToString(result.errors);
      EXPECT_EQ(result.errors[0].rfind("kubelet_files: " + file.string() + ": ", 0), 0u) << result.errors[0];
      ++named;
    }
  }
  stop = true;
  kubelet.join();
  std::ofstream(file) << content;
  const auto after = agent.run_cycle();
  EXPECT_TRUE(after.ok()) << ::testing::PrintToString(after.errors);
  EXPECT_TRUE(after.report && after.report->cpu_manager_state);
  EXPECT_GE(whole + named, 3);
  EXPECT_EQ(agent.counters().failures.count("kubelet_files") ? agent.counters().failures.at("kubelet_files") : 0u,
            static_cast<std::uint64_t>(named));
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

// Rendering decides what a cycle publishes without touching anything.
TEST(Render, WithoutAPlanThePlansFilesAreStaleAndTheNrtStillGoesOut) {
  auto config = config_in("/nonexistent");
  config.apiserver = kube::apiserver::ApiServerConfig{};
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
// back afterwards, so no other test sees them.
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
