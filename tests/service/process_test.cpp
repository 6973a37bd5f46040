// The real binary as an operator runs it: SIGTERM answers every request in
// flight and exits 0; the supervisor replaces a dead replica, stops a group
// whose replica keeps failing, and drains on SIGTERM; bad start-up input is a
// clear error.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <set>

#include "demo_dir.h"

namespace {

using Clock = std::chrono::steady_clock;
using numaserve::testing::demo_dir;
using numaserve::testing::free_port;
using numaserve::testing::Served;
using numaserve::testing::slurp;
using numaserve::testing::start_served;
using numaserve::testing::wait_exit;
using numaserve::testing::wait_for_log;

Served start(std::vector<std::string> args, const std::string& ready_marker) {
  return start_served(NUMASERVE_BINARY, std::move(args), ready_marker);
}

Served start_service(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"serve", "--model-dir", (demo_dir() / "ranker_a").string(), "--feature-store",
                                   (demo_dir() / "store.jsonl").string(), "--port", "0", "--listen-address",
                                   "127.0.0.1", "--workers", "2", "--warmup-rounds", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return start(args, "msg=ready");
}

TEST(Shutdown, InFlightRequestsAreAnsweredThenExitZero) {
  const Served s = start_service({});
  ASSERT_GT(s.pid, 0);
  // Requests of 2000 items from 12 clients keep both workers busy and a
  // queue behind them: with the fused forward a request's own forward is a
  // few milliseconds, so what keeps requests in flight is the queue.
  nlohmann::json items = nlohmann::json::array();
  for (int i = 0; i < 2000; ++i) items.push_back({{"id", "i" + std::to_string(i % 200)}});
  const std::string body = nlohmann::json{{"user", {{"id", "u1"}}}, {"items", items}}.dump();

  struct Sent {
    Clock::time_point start, end;
    int status;  // 0: transport error
  };
  std::mutex mutex;
  std::vector<Sent> sent;
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 12; ++c) {
    clients.emplace_back([&] {
      httplib::Client client("127.0.0.1", s.port);
      client.set_read_timeout(30, 0);
      while (!stop) {
        const auto start = Clock::now();
        auto res = client.Post("/predict", body, "application/json");
        std::lock_guard lock(mutex);
        sent.push_back({start, Clock::now(), res ? res->status : 0});
        if (!res) return;  // the port is closed: the drain has begun
        ++answered;
      }
    });
  }
  while (answered < 12) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto term = Clock::now();
  ASSERT_EQ(kill(s.pid, SIGTERM), 0);
  const int rc = wait_exit(s.pid, 30);
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(rc, 0) << slurp(s.log);

  // Sent well before SIGTERM (the server had read them), answered after it.
  int in_flight = 0;
  for (const auto& r : sent) {
    if (r.start < term - std::chrono::milliseconds(5) && r.end > term) {
      ++in_flight;
      EXPECT_EQ(r.status, 200);
    }
    if (r.end <= term) {
      EXPECT_EQ(r.status, 200);
    }
  }
  EXPECT_GE(in_flight, 3) << "the test needs requests in flight at SIGTERM";
  const std::string log = slurp(s.log);
  EXPECT_NE(log.find("msg=draining signal=SIGTERM"), std::string::npos) << log;
  EXPECT_NE(log.find("msg=stopped"), std::string::npos) << log;
}

// The supervisor with `replicas` unbound replicas of ranker_b on `port`,
// once every replica is warm.
Served start_supervisor(int port, int replicas) {
  return start({"serve", "--model-dir", (demo_dir() / "ranker_b").string(), "--port", std::to_string(port),
                "--listen-address", "127.0.0.1", "--replicas", std::to_string(replicas), "--bind", "none",
                "--warmup-rounds", "1"},
               "every replica is warm");
}

// The supervisor on this machine (the VM test covers NUMA binding): two
// replicas on one port, one killed and replaced, SIGTERM drains both.
TEST(Supervisor, RestartsADeadReplicaAndDrainsOnSigterm) {
  const int port = free_port();
  Served s = start_supervisor(port, 2);
  ASSERT_GT(s.pid, 0);
  // SO_REUSEPORT spreads connections: ask until both replicas answered.
  std::set<int> replicas;
  for (int i = 0; i < 100 && replicas.size() < 2; ++i) {
    httplib::Client client("127.0.0.1", port);
    auto res = client.Get("/placement");
    ASSERT_TRUE(res && res->status == 200);
    const std::string instance = nlohmann::json::parse(res->body)["instance"];
    EXPECT_NE(instance.find(" replica-"), std::string::npos) << instance;
    replicas.insert(std::stoi(instance.substr(instance.find('/') + 1)));
  }
  ASSERT_EQ(replicas.size(), 2u);
  const int victim = *replicas.begin();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_TRUE(wait_for_log(s.log, "replica died; restarting", 10)) << slurp(s.log);
  EXPECT_TRUE(wait_for_log(s.log, "msg=\"replica ready\"", 30)) << slurp(s.log);
  httplib::Client client("127.0.0.1", port);
  auto predict = client.Post("/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1"}]})", "application/json");
  ASSERT_TRUE(predict);
  EXPECT_EQ(predict->status, 200);

  ASSERT_EQ(kill(s.pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(s.pid, 60), 0) << slurp(s.log);
  for (int pid : replicas) EXPECT_NE(kill(pid, 0), 0) << "replica " << pid << " outlived the supervisor";
  EXPECT_NE(slurp(s.log).find("msg=stopped"), std::string::npos);
}

TEST(Supervisor, ReplicasDoNotOutliveAKilledSupervisor) {
  const int port = free_port();
  Served s = start_supervisor(port, 1);
  ASSERT_GT(s.pid, 0);
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/placement");
  ASSERT_TRUE(res && res->status == 200);
  const std::string instance = nlohmann::json::parse(res->body)["instance"];
  const int replica = std::stoi(instance.substr(instance.find('/') + 1));
  ASSERT_EQ(kill(s.pid, SIGKILL), 0);
  waitpid(s.pid, nullptr, 0);
  bool gone = false;
  for (auto deadline = Clock::now() + std::chrono::seconds(30); !gone && Clock::now() < deadline;) {
    gone = kill(replica, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "replica " << replica << " kept running without its supervisor";
  if (!gone) kill(replica, SIGKILL);
}

TEST(Supervisor, AReplicaThatKeepsFailingStopsTheGroup) {
  const auto dir = numaserve::testing::make_temp_dir("numaserve-crashloop");
  const std::string command = std::string(NUMASERVE_BINARY) + " serve --model-dir " + dir.string() +
                              " --replicas 1 --bind none --max-restarts 1 --port " + std::to_string(free_port()) +
                              " 2>" + (dir / "err").string();
  const int status = std::system(command.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string log = slurp(dir / "err");
  EXPECT_NE(log.find("replica died; restarting"), std::string::npos) << log;
  EXPECT_NE(log.find("replica keeps failing; stopping the group"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

TEST(Startup, AStoreValueTheModelCannotReadStopsStartUp) {
  const auto dir = numaserve::testing::make_temp_dir("numaserve-badstore");
  std::ofstream(dir / "store.jsonl") << R"({"kind": "item", "id": "i1", "features": {"category": ["a", "b"]}})" << "\n";
  const std::string command = std::string(NUMASERVE_BINARY) + " serve --model-dir " +
                              (demo_dir() / "ranker_b").string() + " --feature-store " + (dir / "store.jsonl").string() +
                              " --port 0 2>" + (dir / "err").string();
  const int status = std::system(command.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(slurp(dir / "err").find("model ranker_b: feature store item 'i1' category: want an id, got a list"),
            std::string::npos)
      << slurp(dir / "err");
  std::filesystem::remove_all(dir);
}

TEST(Startup, BadModelDirectoryIsAClearErrorAndExitOne) {
  const auto dir = numaserve::testing::make_temp_dir("numaserve-nomodel");
  const std::string command = std::string(NUMASERVE_BINARY) + " serve --model-dir " + dir.string() + " --port 0 2>" +
                              (dir / "err").string();
  const int status = std::system(command.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(slurp(dir / "err").find(dir.string() + "/model.yaml"), std::string::npos) << slurp(dir / "err");
  std::filesystem::remove_all(dir);
}

}  // namespace
