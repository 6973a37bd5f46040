#pragma once
// The real `numaserve` binary as an operator runs it, for the process and
// hostile-world tests: started with its stderr in a file, waited for until
// its log says it is ready, and reaped. Torch-free: these tests only talk
// to the process.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace numaserve::testing {

inline std::filesystem::path make_temp_dir(const std::string& stem) {
  std::string pattern = (std::filesystem::temp_directory_path() / (stem + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
  return pattern;
}

inline std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Served {
  pid_t pid = -1;
  int port = 0;
  std::filesystem::path log;
};

// Starts `binary ARGS...` with stderr in a file (pinned to `cpu` when it is
// not negative) and waits until the log shows `ready_marker` and a port.
// `in_child` runs in the child before exec (a test moving it into a cgroup).
inline Served start_served(const std::string& binary, std::vector<std::string> args, const std::string& ready_marker,
                           int cpu = -1, const std::function<void()>& in_child = {}) {
  using Clock = std::chrono::steady_clock;
  Served s;
  s.log = make_temp_dir("numaserve-process") / "stderr.log";
  args.insert(args.begin(), binary);
  s.pid = fork();
  if (s.pid == 0) {
    const int fd = ::open(s.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    if (in_child) in_child();
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

// Waits for the process; -1 when it did not end within `seconds` (it is
// killed then).
inline int wait_exit(pid_t pid, int seconds) {
  using Clock = std::chrono::steady_clock;
  for (auto deadline = Clock::now() + std::chrono::seconds(seconds); Clock::now() < deadline;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

#ifdef NUMASERVE_BINARY
// Tiny demo models and their store (200 items "i0".."i199"), made once per
// test binary by the binary itself.
inline const std::filesystem::path& tiny_demo_models() {
  static const std::filesystem::path dir = [] {
    const auto d = make_temp_dir("numaserve-tiny-models");
    const std::string command = std::string(NUMASERVE_BINARY) + " make-demo-models " + d.string() +
                                " --embedding-mb 1 --users 50 --items 200 > /dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0);
    return d;
  }();
  return dir;
}
#endif

inline int free_port() {
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

inline bool wait_for_log(const std::filesystem::path& log, const std::string& text, int seconds) {
  using Clock = std::chrono::steady_clock;
  for (auto deadline = Clock::now() + std::chrono::seconds(seconds); Clock::now() < deadline;) {
    if (slurp(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace numaserve::testing
