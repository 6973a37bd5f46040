#pragma once
// What the VM's tests share (vm_placement_test.cpp: topology, cgroups,
// memory policy, the agent; vm_startup_test.cpp: the service's start-up and
// a reload): the fixture that knows the VM's layout from the harness's
// flags, cgroups of the test's own, children run in them, and where pages
// landed.

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

namespace numaserve::vm_testing {

inline unsigned env_unsigned(const char* name) {
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

inline void write_file(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value << std::flush;
  ASSERT_TRUE(out.good()) << "cannot write '" << value << "' to " << path << ": " << std::strerror(errno);
}

// A cgroup v2 child of the root with the given cpuset, as the kubelet makes
// for a Guaranteed pod on one NUMA node.
inline std::string make_cgroup(const std::string& name, const CpuSet& cpus, unsigned mem_node) {
  write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpuset");
  const std::string dir = "/sys/fs/cgroup/" + name;
  std::filesystem::create_directory(dir);
  write_file(dir + "/cpuset.cpus", cpus.to_list());
  write_file(dir + "/cpuset.mems", std::to_string(mem_node));
  return dir;
}

// In a forked child: moves it into cgroup `cgroup_dir` (nothing if empty),
// or says why not on its stdout and exits 1.
inline void join_cgroup_or_exit(const std::string& cgroup_dir) {
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
inline std::string in_child(const std::string& cgroup_dir, const std::function<void()>& body) {
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

inline std::function<void()> printing(std::string (*compute)()) {
  return [compute] { std::fputs(compute().c_str(), stdout); };
}

inline std::string placement_summary() {
  auto p = discover_placement();
  if (!p) return "error: " + p.error().message;
  return "cpus=" + p->cpus().to_list() + " mems=" + p->mems().to_list() +
         " cgroup_v" + (p->cgroup ? std::to_string(p->cgroup->version) : "none");
}

// Maps and touches 32 MiB, then reports which nodes its pages are on, from
// the kernel's own account (/proc/self/numa_maps).
inline std::string allocate_and_locate() {
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

inline std::string all_pages_on(unsigned node) {
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
inline std::string describe(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "signal " + std::to_string(WTERMSIG(wait_status));
  return "wait status " + std::to_string(wait_status);
}

inline std::string read_log(const std::string& path) {
  auto text = read_text_file(path);
  return text ? *text : "(no log: " + text.error().message + ")";
}

}  // namespace numaserve::vm_testing
