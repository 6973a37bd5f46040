// The real binary as an operator runs it: SIGTERM answers every request in
// flight and exits 0; the supervisor replaces a dead worker, stops a group
// whose worker keeps failing, and drains on SIGTERM; bad start-up input is a
// clear error.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "demo_dir.h"

namespace {

using Clock = std::chrono::steady_clock;
using numaserve::testing::demo_dir;

struct Served {
  pid_t pid = -1;
  int port = 0;
  std::filesystem::path log;
};

std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts `numaserve ARGS...` with stderr in a file and waits until the log
// shows `ready_marker` (and a port).
Served start(std::vector<std::string> args, const std::string& ready_marker) {
  Served s;
  s.log = numaserve::testing::make_temp_dir("numaserve-process") / "stderr.log";
  args.insert(args.begin(), NUMASERVE_BINARY);
  s.pid = fork();
  if (s.pid == 0) {
    const int fd = ::open(s.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const std::regex port(R"(port=(\d+))");
  for (auto deadline = Clock::now() + std::chrono::seconds(60); Clock::now() < deadline;) {
    const std::string text = slurp(s.log);
    std::smatch m;
    if (text.find(ready_marker) != std::string::npos && std::regex_search(text, m, port)) {
      s.port = std::stoi(m[1]);
      return s;
    }
    if (waitpid(s.pid, nullptr, WNOHANG) == s.pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "service did not become ready:\n" << slurp(s.log);
  kill(s.pid, SIGKILL);
  waitpid(s.pid, nullptr, 0);
  s.pid = -1;
  return s;
}

Served start_service(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"serve", "--model-dir", (demo_dir() / "ranker_a").string(), "--feature-store",
                                   (demo_dir() / "store.jsonl").string(), "--port", "0", "--listen-address",
                                   "127.0.0.1", "--workers", "2", "--warmup-rounds", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return start(args, "msg=ready");
}

// Waits for the process; -1 when it did not end within `seconds`.
int wait_exit(pid_t pid, int seconds) {
  for (auto deadline = Clock::now() + std::chrono::seconds(seconds); Clock::now() < deadline;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

TEST(Shutdown, InFlightRequestsAreAnsweredThenExitZero) {
  const Served s = start_service({});
  ASSERT_GT(s.pid, 0);
  // Requests of 2000 items keep both workers busy and a queue behind them.
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
  for (int c = 0; c < 6; ++c) {
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

int free_port() {
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  close(sock);
  return ntohs(addr.sin_port);
}

bool wait_for_log(const std::filesystem::path& log, const std::string& text, int seconds) {
  for (auto deadline = Clock::now() + std::chrono::seconds(seconds); Clock::now() < deadline;) {
    if (slurp(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The supervisor with `replicas` unbound workers of ranker_b on `port`,
// once every worker is warm.
Served start_supervisor(int port, int replicas) {
  return start({"serve", "--model-dir", (demo_dir() / "ranker_b").string(), "--port", std::to_string(port),
                "--listen-address", "127.0.0.1", "--replicas", std::to_string(replicas), "--bind", "none",
                "--warmup-rounds", "1"},
               "every worker is warm");
}

// The supervisor on this machine (the VM test covers NUMA binding): two
// workers on one port, one killed and replaced, SIGTERM drains both.
TEST(Supervisor, RestartsADeadWorkerAndDrainsOnSigterm) {
  const int port = free_port();
  Served s = start_supervisor(port, 2);
  ASSERT_GT(s.pid, 0);
  // SO_REUSEPORT spreads connections: ask until both workers answered.
  std::set<int> workers;
  for (int i = 0; i < 100 && workers.size() < 2; ++i) {
    httplib::Client client("127.0.0.1", port);
    auto res = client.Get("/placement");
    ASSERT_TRUE(res && res->status == 200);
    const std::string instance = nlohmann::json::parse(res->body)["instance"];
    EXPECT_NE(instance.find(" worker-"), std::string::npos) << instance;
    workers.insert(std::stoi(instance.substr(instance.find('/') + 1)));
  }
  ASSERT_EQ(workers.size(), 2u);
  const int victim = *workers.begin();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_TRUE(wait_for_log(s.log, "worker died; restarting", 10)) << slurp(s.log);
  EXPECT_TRUE(wait_for_log(s.log, "msg=\"worker ready\"", 30)) << slurp(s.log);
  httplib::Client client("127.0.0.1", port);
  auto predict = client.Post("/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1"}]})", "application/json");
  ASSERT_TRUE(predict);
  EXPECT_EQ(predict->status, 200);

  ASSERT_EQ(kill(s.pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(s.pid, 60), 0) << slurp(s.log);
  for (int pid : workers) EXPECT_NE(kill(pid, 0), 0) << "worker " << pid << " outlived the supervisor";
  EXPECT_NE(slurp(s.log).find("msg=stopped"), std::string::npos);
}

TEST(Supervisor, WorkersDoNotOutliveAKilledSupervisor) {
  const int port = free_port();
  Served s = start_supervisor(port, 1);
  ASSERT_GT(s.pid, 0);
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/placement");
  ASSERT_TRUE(res && res->status == 200);
  const std::string instance = nlohmann::json::parse(res->body)["instance"];
  const int worker = std::stoi(instance.substr(instance.find('/') + 1));
  ASSERT_EQ(kill(s.pid, SIGKILL), 0);
  waitpid(s.pid, nullptr, 0);
  bool gone = false;
  for (auto deadline = Clock::now() + std::chrono::seconds(30); !gone && Clock::now() < deadline;) {
    gone = kill(worker, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "worker " << worker << " kept running without its supervisor";
  if (!gone) kill(worker, SIGKILL);
}

TEST(Supervisor, AWorkerThatKeepsFailingStopsTheGroup) {
  const auto dir = numaserve::testing::make_temp_dir("numaserve-crashloop");
  const std::string command = std::string(NUMASERVE_BINARY) + " serve --model-dir " + dir.string() +
                              " --replicas 1 --bind none --max-restarts 1 --port " + std::to_string(free_port()) +
                              " 2>" + (dir / "err").string();
  const int status = std::system(command.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string log = slurp(dir / "err");
  EXPECT_NE(log.find("worker died; restarting"), std::string::npos) << log;
  EXPECT_NE(log.find("worker keeps failing; stopping the group"), std::string::npos) << log;
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
