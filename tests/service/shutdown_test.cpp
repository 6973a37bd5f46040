// SIGTERM on the real binary: requests in flight when it arrives are all
// answered with 200, then the process exits 0.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
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

Served start_service(const std::vector<std::string>& extra) {
  Served s;
  s.log = numaserve::testing::make_temp_dir("numaserve-shutdown") / "stderr.log";
  std::vector<std::string> args = {NUMASERVE_BINARY, "serve", "--model-dir", (demo_dir() / "ranker_a").string(),
                                   "--feature-store", (demo_dir() / "store.jsonl").string(), "--port", "0",
                                   "--listen-address", "127.0.0.1", "--workers", "2", "--warmup-rounds", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
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
    if (text.find("msg=ready") != std::string::npos && std::regex_search(text, m, port)) {
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
