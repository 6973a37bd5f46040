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
#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"

namespace numaserve::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kReadyFdEnv = "NUMASERVE_READY_FD";
constexpr const char* kReplicaEnv = "NUMASERVE_REPLICA";
constexpr const char* kReplicaIndexEnv = "NUMASERVE_REPLICA_INDEX";

// The allowed whole cores of a node, in CPU order: replicas get whole cores
// so that two of them never share a core's SMT siblings.
std::vector<CpuSet> allowed_cores(const NumaNode& node, const CpuSet& allowed) {
  std::vector<CpuSet> cores;
  for (const auto& core : node.cores) {
    const CpuSet mine = core & allowed;
    if (!mine.empty()) cores.push_back(mine);
  }
  return cores;
}

// What the supervisor knows of one replica's current process.
struct ReplicaProcess {
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
[[noreturn]] void exec_replica(const numa::ForkSafeBinding& binding, char* const* argv, const sigset_t& original_mask,
                               pid_t supervisor) {
  // Before exec, so nothing of the replica is allocated elsewhere; the
  // replica binds again itself (to the same node, from its CPUs).
  binding.apply();
  sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  // A replica must not outlive its supervisor (killed, or crashed): it gets
  // SIGTERM and drains, instead of holding the port as an orphan.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != supervisor) _exit(1);  // it died before prctl took effect
  execv(argv[0], argv);
  _exit(127);
}

}  // namespace

std::string Replica::name() const {
  return "replica-" + std::to_string(index) + (node ? " (node " + std::to_string(*node) + ")" : "");
}

Result<std::vector<Replica>> plan_replicas(const Placement& placement, const Topology& topology,
                                           const ReplicaConfig& config) {
  const CpuSet allowed = placement.cpus() & topology.online_cpus;
  const NodeSet mems = placement.mems();
  if (allowed.empty()) return make_error(Error::Code::kUnavailable, "no usable CPUs in this process's cpuset");
  std::vector<Replica> replicas;
  if (config.bind == Bind::kNone) {
    const unsigned n = config.replicas != 0 ? config.replicas : config.per_numa_node * static_cast<unsigned>(topology.nodes.size());
    if (n == 0) return make_error(Error::Code::kInvalidArgument, "--bind none needs --replicas N");
    for (unsigned i = 0; i < n; ++i) replicas.push_back({i, std::nullopt, allowed, mems});
    return replicas;
  }
  std::vector<const NumaNode*> nodes;
  for (const auto& node : topology.nodes) {
    if (node.cpus.intersects(allowed)) nodes.push_back(&node);
  }
  unsigned per_numa_node = config.per_numa_node;
  if (per_numa_node == 0) {
    if (config.replicas % nodes.size() != 0 || config.replicas == 0) {
      return make_error(Error::Code::kInvalidArgument,
                        std::to_string(config.replicas) + " replicas do not spread evenly over the " +
                            std::to_string(nodes.size()) + " NUMA nodes with allowed CPUs");
    }
    per_numa_node = config.replicas / static_cast<unsigned>(nodes.size());
  }
  for (const NumaNode* node : nodes) {
    const auto cores = allowed_cores(*node, allowed);
    if (cores.size() < per_numa_node) {
      return make_error(Error::Code::kInvalidArgument,
                        std::to_string(per_numa_node) + " replicas per NUMA node need " + std::to_string(per_numa_node) +
                            " cores, node " + std::to_string(node->os_index) + " has " +
                            std::to_string(cores.size()) + " allowed (CPUs " + (node->cpus & allowed).to_list() + ")");
    }
    // Memory on the node when the cpuset allows it, else what it allows.
    const NodeSet node_mems = mems.contains(node->os_index) ? NodeSet{node->os_index} : mems;
    for (unsigned r = 0; r < per_numa_node; ++r) {
      CpuSet cpus;
      // Contiguous runs of whole cores: replica r gets cores [r*n/k, (r+1)*n/k).
      for (std::size_t c = r * cores.size() / per_numa_node; c < (r + 1) * cores.size() / per_numa_node; ++c) cpus |= cores[c];
      replicas.push_back({static_cast<unsigned>(replicas.size()), node->os_index, cpus, node_mems});
    }
  }
  return replicas;
}

bool supervised() { return std::getenv(kReadyFdEnv) != nullptr; }

std::string replica_name() {
  const char* name = std::getenv(kReplicaEnv);
  return name != nullptr ? name : "";
}

void report_ready() {
  const char* fd = std::getenv(kReadyFdEnv);
  const char* index = std::getenv(kReplicaIndexEnv);
  if (fd == nullptr || index == nullptr) return;
  const std::string line = std::string(index) + "\n";
  // One short write: atomic on a pipe, so replicas' lines never interleave.
  [[maybe_unused]] const ssize_t n = ::write(std::atoi(fd), line.data(), line.size());
}

namespace {

// The running group: its replicas' processes, and what the loop in run()
// does with them.
class Group {
 public:
  Group(const std::vector<Replica>& replicas, const SupervisorConfig& config, const sigset_t& original_mask,
        int ready_fd)
      : replicas_(replicas),
        config_(config),
        original_mask_(original_mask),
        ready_fd_(ready_fd),
        processes_(replicas.size()) {
    for (const auto& arg : config.command) argv_.push_back(const_cast<char*>(arg.c_str()));
    argv_.push_back(nullptr);
  }

  void start(std::size_t i) {
    // Set in the supervisor, before fork: the child may only exec.
    setenv(kReplicaEnv, replicas_[i].name().c_str(), 1);
    setenv(kReplicaIndexEnv, std::to_string(i).c_str(), 1);
    const pid_t self = getpid();
    const numa::ForkSafeBinding binding(replicas_[i].cpus,
                                        replicas_[i].node ? std::optional<NodeSet>(replicas_[i].mems) : std::nullopt);
    const pid_t pid = fork();
    if (pid == 0) exec_replica(binding, argv_.data(), original_mask_, self);
    if (pid < 0) {
      log(LogLevel::kError, std::string("fork: ") + std::strerror(errno), {{"replica", replicas_[i].name()}});
      processes_[i].start_at = Clock::now() + std::chrono::seconds(1);  // tend() tries again then
      return;
    }
    processes_[i].pid = pid;
    processes_[i].ready = false;
    log(LogLevel::kInfo, "replica started", {{"replica", replicas_[i].name()}, {"pid", std::to_string(pid)}});
  }

  // SIGTERM to every replica; SIGKILL to those left after the grace period.
  void stop(Clock::time_point now, bool failure) {
    stopping_ = true;
    failed_ |= failure;
    kill_at_ = now + to_duration(config_.grace_seconds);
    signal_all(SIGTERM);
  }

  // Every exited replica (SIGCHLD may stand for several): restarted after a
  // backoff, or the group stopped when one keeps failing.
  void reap(Clock::time_point now) {
    int status = 0;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      const auto it = std::find_if(processes_.begin(), processes_.end(),
                                   [pid](const ReplicaProcess& p) { return p.pid == pid; });
      if (it == processes_.end()) continue;  // waitpid(-1) reaps any child; only replicas matter
      const auto i = static_cast<std::size_t>(it - processes_.begin());
      it->pid = -1;
      it->ready = false;  // a dead replica is not warm: the group waits for its restart
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (stopping_) {
        failed_ |= !clean;
        log(clean ? LogLevel::kInfo : LogLevel::kWarning, "replica stopped",
            {{"replica", replicas_[i].name()}, {"status", describe_exit(status)}});
        continue;
      }
      schedule_restart(i, now, status);
    }
  }

  // Ready reports, "<index>\n" per warm replica; the group opens when all are.
  void read_ready() {
    char buffer[256];
    for (ssize_t n; (n = ::read(ready_fd_, buffer, sizeof buffer)) > 0;) pending_.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t eol; (eol = pending_.find('\n')) != std::string::npos; pending_.erase(0, eol + 1)) {
      const auto i = static_cast<std::size_t>(std::atoi(pending_.substr(0, eol).c_str()));
      if (i >= processes_.size() || processes_[i].pid < 0) continue;  // late report of a process since reaped
      processes_[i].ready = true;
      if (open_) {
        kill(processes_[i].pid, SIGUSR1);  // a restarted replica joins the open group
        log(LogLevel::kInfo, "replica ready", {{"replica", replicas_[i].name()}});
      }
    }
    if (!open_ && !stopping_ &&
        std::all_of(processes_.begin(), processes_.end(), [](const ReplicaProcess& p) { return p.ready; })) {
      open_ = true;
      signal_all(SIGUSR1);
      log(LogLevel::kInfo, "ready: every replica is warm", {{"replicas", std::to_string(processes_.size())}});
    }
  }

  // false once stopping and every replica is gone.
  bool tend(Clock::time_point now) {
    if (stopping_) {
      if (std::all_of(processes_.begin(), processes_.end(), [](const ReplicaProcess& p) { return p.pid < 0; })) {
        return false;
      }
      if (now >= kill_at_) {
        signal_all(SIGKILL);
        failed_ = true;
      }
      return true;
    }
    for (std::size_t i = 0; i < processes_.size(); ++i) {
      if (processes_[i].pid < 0 && now >= processes_[i].start_at) start(i);
    }
    return true;
  }

  bool stopping() const { return stopping_; }
  bool failed() const { return failed_; }

 private:
  // Replica i died while the group runs: start it again after a backoff, or
  // stop the group when it died max_restarts times within the window: a
  // replica that cannot stay up needs an operator, and exit 1 lets systemd or
  // the container runtime say so.
  void schedule_restart(std::size_t i, Clock::time_point now, int status) {
    auto& r = processes_[i].restarts;
    while (!r.empty() && to_seconds(now - r.front()) > config_.restart_window_seconds) r.pop_front();
    if (r.size() >= config_.max_restarts) {
      log(LogLevel::kError, "replica keeps failing; stopping the group",
          {{"replica", replicas_[i].name()}, {"status", describe_exit(status)}, {"restarts", std::to_string(r.size())}});
      stop(now, true);
      return;
    }
    r.push_back(now);
    // 1 s, 2 s, 4 s ... 30 s: a crash loop does not spin.
    const double backoff = std::min(30.0, std::pow(2.0, static_cast<double>(r.size() - 1)));
    processes_[i].start_at = now + to_duration(backoff);
    log(LogLevel::kWarning, "replica died; restarting",
        {{"replica", replicas_[i].name()}, {"status", describe_exit(status)}, {"in_seconds", std::to_string(backoff)}});
  }

  void signal_all(int signal) {
    for (const auto& p : processes_) {
      if (p.pid > 0) kill(p.pid, signal);
    }
  }

  const std::vector<Replica>& replicas_;
  const SupervisorConfig& config_;
  const sigset_t original_mask_;
  const int ready_fd_;
  std::vector<ReplicaProcess> processes_;  // processes_[i] runs replicas_[i]
  std::vector<char*> argv_;  // made before any fork: the child only execs it
  bool open_ = false, stopping_ = false, failed_ = false;
  Clock::time_point kill_at_;
  std::string pending_;
};

}  // namespace

int run(const std::vector<Replica>& replicas, const SupervisorConfig& config) {
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

  // The layout first, so an operator reads where each replica runs before any starts.
  for (const auto& replica : replicas) {
    log(LogLevel::kInfo, "replica planned",
        {{"replica", replica.name()}, {"cpus", replica.cpus.to_list()}, {"mems", replica.mems.to_list()}});
  }
  Group group(replicas, config, original, ready_pipe[0]);
  for (std::size_t i = 0; i < replicas.size(); ++i) group.start(i);
  while (true) {
    // 100 ms: how late a due restart or a ready report may be noticed.
    timespec tick{0, 100 * 1000 * 1000};
    const int signal = sigtimedwait(&signals, nullptr, &tick);
    const auto now = Clock::now();
    if ((signal == SIGTERM || signal == SIGINT) && !group.stopping()) {
      log(LogLevel::kInfo, "stopping: SIGTERM to every replica");
      group.stop(now, false);
    }
    group.reap(now);
    group.read_ready();
    if (!group.tend(now)) break;
  }
  log(group.failed() ? LogLevel::kError : LogLevel::kInfo, "stopped");
  return group.failed() ? 1 : 0;
}

}  // namespace numaserve::supervisor
