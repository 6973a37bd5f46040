#include "supervisor/supervisor.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>

#include "numa/numa.h"
#include "numaserve/common/log.h"

namespace numaserve::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kReadyFdEnv = "NUMASERVE_READY_FD";
constexpr const char* kWorkerEnv = "NUMASERVE_WORKER";
constexpr const char* kWorkerIndexEnv = "NUMASERVE_WORKER_INDEX";

// The allowed whole cores of a node, in CPU order.
std::vector<CpuSet> allowed_cores(const NumaNode& node, const CpuSet& allowed) {
  std::vector<CpuSet> cores;
  for (const auto& core : node.cores) {
    const CpuSet mine = core & allowed;
    if (!mine.empty()) cores.push_back(mine);
  }
  return cores;
}

struct Worker {
  pid_t pid = -1;
  bool ready = false;
  Clock::time_point start_at;
  std::deque<Clock::time_point> restarts;
};

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// In the child, between fork and exec: only async-signal-safe calls.
// The ready pipe's write end is inherited (not close-on-exec); its number
// travels in NUMASERVE_READY_FD.
[[noreturn]] void exec_worker(const numa::ForkSafeBinding& binding, char* const* argv, const sigset_t& original_mask,
                              pid_t supervisor) {
  // Before exec, so nothing of the worker is allocated elsewhere; the
  // worker binds again itself (to the same node, from its CPUs).
  binding.apply();
  sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  // A worker must not outlive its supervisor (killed, or crashed): it gets
  // SIGTERM and drains, instead of holding the port as an orphan.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != supervisor) _exit(1);  // it died before prctl took effect
  execv(argv[0], argv);
  _exit(127);
}

}  // namespace

std::string Slot::name() const {
  return "worker-" + std::to_string(index) + (node ? " (node " + std::to_string(*node) + ")" : "");
}

Result<std::vector<Slot>> plan_replicas(const Placement& placement, const Topology& topology,
                                        const ReplicaConfig& config) {
  const CpuSet allowed = placement.cpus() & topology.online_cpus;
  const NodeSet mems = placement.mems();
  if (allowed.empty()) return make_error(Error::Code::kUnavailable, "no usable CPUs in this process's cpuset");
  std::vector<Slot> slots;
  if (config.bind == Bind::kNone) {
    const unsigned n = config.replicas != 0 ? config.replicas : config.per_node * static_cast<unsigned>(topology.nodes.size());
    if (n == 0) return make_error(Error::Code::kInvalidArgument, "--bind none needs --replicas N");
    for (unsigned i = 0; i < n; ++i) slots.push_back({i, std::nullopt, allowed, mems});
    return slots;
  }
  std::vector<const NumaNode*> nodes;
  for (const auto& node : topology.nodes) {
    if (node.cpus.intersects(allowed)) nodes.push_back(&node);
  }
  unsigned per_node = config.per_node;
  if (per_node == 0) {
    if (config.replicas % nodes.size() != 0 || config.replicas == 0) {
      return make_error(Error::Code::kInvalidArgument,
                        std::to_string(config.replicas) + " replicas do not spread evenly over the " +
                            std::to_string(nodes.size()) + " NUMA nodes with allowed CPUs");
    }
    per_node = config.replicas / static_cast<unsigned>(nodes.size());
  }
  for (const NumaNode* node : nodes) {
    const auto cores = allowed_cores(*node, allowed);
    if (cores.size() < per_node) {
      return make_error(Error::Code::kInvalidArgument,
                        std::to_string(per_node) + " replicas per node need " + std::to_string(per_node) +
                            " cores, node " + std::to_string(node->os_index) + " has " +
                            std::to_string(cores.size()) + " allowed (CPUs " + (node->cpus & allowed).to_list() + ")");
    }
    // Memory on the node when the cpuset allows it, else what it allows.
    const NodeSet node_mems = mems.contains(node->os_index) ? NodeSet{node->os_index} : mems;
    for (unsigned r = 0; r < per_node; ++r) {
      CpuSet cpus;
      // Contiguous runs of whole cores: replica r gets cores [r*n/k, (r+1)*n/k).
      for (std::size_t c = r * cores.size() / per_node; c < (r + 1) * cores.size() / per_node; ++c) cpus |= cores[c];
      slots.push_back({static_cast<unsigned>(slots.size()), node->os_index, cpus, node_mems});
    }
  }
  return slots;
}

bool supervised() { return std::getenv(kReadyFdEnv) != nullptr; }

std::string worker_name() {
  const char* name = std::getenv(kWorkerEnv);
  return name != nullptr ? name : "";
}

void report_ready() {
  const char* fd = std::getenv(kReadyFdEnv);
  const char* index = std::getenv(kWorkerIndexEnv);
  if (fd == nullptr || index == nullptr) return;
  const std::string line = std::string(index) + "\n";
  // One short write: atomic on a pipe, so workers' lines never interleave.
  [[maybe_unused]] const ssize_t n = ::write(std::atoi(fd), line.data(), line.size());
}

int run(const std::vector<Slot>& slots, const SupervisorConfig& config) {
  sigset_t signals, original;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGCHLD}) sigaddset(&signals, s);
  sigprocmask(SIG_BLOCK, &signals, &original);

  int ready_pipe[2];
  if (pipe(ready_pipe) != 0) {
    log(LogLevel::kError, std::string("pipe: ") + std::strerror(errno));
    return 1;
  }
  fcntl(ready_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(ready_pipe[0], F_SETFL, O_NONBLOCK);
  setenv(kReadyFdEnv, std::to_string(ready_pipe[1]).c_str(), 1);

  for (const auto& slot : slots) {
    log(LogLevel::kInfo, "slot", {{"worker", slot.name()}, {"cpus", slot.cpus.to_list()}, {"mems", slot.mems.to_list()}});
  }
  std::vector<Worker> workers(slots.size());
  std::vector<char*> argv;
  for (const auto& arg : config.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const auto start = [&](std::size_t i) {
    setenv(kWorkerEnv, slots[i].name().c_str(), 1);
    setenv(kWorkerIndexEnv, std::to_string(i).c_str(), 1);
    const pid_t self = getpid();
    const numa::ForkSafeBinding binding(slots[i].cpus,
                                        slots[i].node ? std::optional<NodeSet>(slots[i].mems) : std::nullopt);
    const pid_t pid = fork();
    if (pid == 0) exec_worker(binding, argv.data(), original, self);
    if (pid < 0) {
      log(LogLevel::kError, std::string("fork: ") + std::strerror(errno), {{"worker", slots[i].name()}});
      workers[i].start_at = Clock::now() + std::chrono::seconds(1);
      return;
    }
    workers[i].pid = pid;
    workers[i].ready = false;
    log(LogLevel::kInfo, "worker started", {{"worker", slots[i].name()}, {"pid", std::to_string(pid)}});
  };
  for (std::size_t i = 0; i < slots.size(); ++i) start(i);

  bool open = false, stopping = false, failed = false;
  Clock::time_point kill_at;
  std::string pending;
  while (true) {
    timespec tick{0, 100 * 1000 * 1000};
    const int signal = sigtimedwait(&signals, nullptr, &tick);
    const auto now = Clock::now();
    if ((signal == SIGTERM || signal == SIGINT) && !stopping) {
      log(LogLevel::kInfo, "stopping: SIGTERM to every worker");
      stopping = true;
      kill_at = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.grace_seconds));
      for (const auto& w : workers) {
        if (w.pid > 0) kill(w.pid, SIGTERM);
      }
    }
    // Reap every exited worker (SIGCHLD may stand for several).
    int status = 0;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      const auto it = std::find_if(workers.begin(), workers.end(), [pid](const Worker& w) { return w.pid == pid; });
      if (it == workers.end()) continue;
      const auto i = static_cast<std::size_t>(it - workers.begin());
      it->pid = -1;
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (stopping) {
        failed |= !clean;
        log(clean ? LogLevel::kInfo : LogLevel::kWarning, "worker stopped",
            {{"worker", slots[i].name()}, {"status", describe_exit(status)}});
        continue;
      }
      auto& r = it->restarts;
      while (!r.empty() && now - r.front() > std::chrono::duration<double>(config.restart_window_seconds)) r.pop_front();
      if (r.size() >= config.max_restarts) {
        log(LogLevel::kError, "worker keeps failing; stopping the group",
            {{"worker", slots[i].name()}, {"status", describe_exit(status)},
             {"restarts", std::to_string(r.size())}});
        stopping = failed = true;
        kill_at = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.grace_seconds));
        for (const auto& w : workers) {
          if (w.pid > 0) kill(w.pid, SIGTERM);
        }
        continue;
      }
      r.push_back(now);
      // 1 s, 2 s, 4 s ... 30 s: a crash loop does not spin.
      const double backoff = std::min(30.0, std::pow(2.0, static_cast<double>(r.size() - 1)));
      it->start_at = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff));
      log(LogLevel::kWarning, "worker died; restarting",
          {{"worker", slots[i].name()}, {"status", describe_exit(status)}, {"in_seconds", std::to_string(backoff)}});
    }
    // Ready reports: "<index>\n" per warm worker.
    char buffer[256];
    for (ssize_t n; (n = ::read(ready_pipe[0], buffer, sizeof buffer)) > 0;) pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1)) {
      const auto i = static_cast<std::size_t>(std::atoi(pending.substr(0, eol).c_str()));
      if (i >= workers.size() || workers[i].pid < 0) continue;
      workers[i].ready = true;
      if (open) {
        kill(workers[i].pid, SIGUSR1);  // a restarted worker joins the open group
        log(LogLevel::kInfo, "worker ready", {{"worker", slots[i].name()}});
      }
    }
    if (!open && !stopping && std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.ready; })) {
      open = true;
      for (const auto& w : workers) kill(w.pid, SIGUSR1);
      log(LogLevel::kInfo, "ready: every worker is warm", {{"workers", std::to_string(workers.size())}});
    }
    if (stopping) {
      if (std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.pid < 0; })) break;
      if (now >= kill_at) {
        for (const auto& w : workers) {
          if (w.pid > 0) kill(w.pid, SIGKILL);
        }
        failed = true;
      }
      continue;
    }
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (workers[i].pid < 0 && now >= workers[i].start_at) start(i);
    }
  }
  log(failed ? LogLevel::kError : LogLevel::kInfo, "stopped");
  return failed ? 1 : 0;
}

}  // namespace numaserve::supervisor
