#include "updater/triggers.h"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "numaserve/common/names.h"

namespace numaserve::agent::updater {
namespace {

// The signals the loop reads, by the names its log lines give them.
constexpr auto kSignalNames = make_names<int>({{SIGHUP, "SIGHUP"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}});

sigset_t loop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (const auto& [signal, name] : kSignalNames.table) sigaddset(&signals, signal);
  return signals;
}

}  // namespace

void block_signals() {
  const sigset_t signals = loop_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

Result<Triggers> Triggers::open(const LoopConfig& config) {
  const sigset_t signals = loop_signals();
  UniqueFd signal_fd(::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (signal_fd.fd < 0) return make_error(Error::Code::kInternal, std::string("signalfd: ") + std::strerror(errno));
  UniqueFd inotify_fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (inotify_fd.fd < 0) {
    log(LogLevel::kWarning, "inotify unavailable; relying on the interval", {{"error", std::strerror(errno)}});
  }
  Triggers triggers(std::move(signal_fd), std::move(inotify_fd), config);
  if (triggers.inotify_fd_.fd >= 0) triggers.watch(config.watched);
  return triggers;
}

Triggers::Triggers(UniqueFd signal_fd, UniqueFd inotify_fd, const LoopConfig& config)
    : signal_fd_(std::move(signal_fd)),
      inotify_fd_(std::move(inotify_fd)),
      interval_(to_duration(config.interval.count())),
      min_gap_(to_duration(1.0 / config.max_events_per_second)),
      started_(Clock::now()) {}

void Triggers::watch(const std::vector<Watched>& watched) {
  for (const auto& w : watched) {
    // Writes in place, atomic renames, touches, and a socket recreated.
    const int wd = ::inotify_add_watch(inotify_fd_.fd, w.dir.c_str(),
                                       IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ATTRIB);
    if (wd < 0) {
      log(LogLevel::kWarning, "cannot watch; relying on the interval",
          {{"dir", w.dir.string()}, {"error", std::strerror(errno)}});
      continue;
    }
    watches_[wd] = w;
  }
}

Result<Trigger> Triggers::next() {
  while (true) {
    pollfd fds[2] = {{signal_fd_.fd, POLLIN, 0}, {inotify_fd_.fd, POLLIN, 0}};
    const int ready = ::poll(fds, inotify_fd_.fd >= 0 ? 2 : 1, poll_timeout_ms());
    if (ready < 0 && errno != EINTR) return make_error(Error::Code::kInternal, std::string("poll: ") + std::strerror(errno));
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      if (auto signal = read_signal()) return begin(std::move(*signal));
    }
    if (ready > 0 && inotify_fd_.fd >= 0 && (fds[1].revents & POLLIN)) read_changes();
    const Clock::time_point now = Clock::now();
    if (!changed_.empty() && now >= started_ + min_gap_) return begin({Trigger::Kind::kFileChanged, "changed " + changed_});
    if (now >= started_ + interval_) return begin({Trigger::Kind::kInterval, "interval"});
  }
}

// Until the interval ends, or sooner when a change waits: a change runs a
// cycle at once, unless the last one began under min_gap ago.
int Triggers::poll_timeout_ms() const {
  const Clock::time_point periodic = started_ + interval_;
  const Clock::time_point due = changed_.empty() ? periodic : std::min(periodic, started_ + min_gap_);
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(due - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(wait.count(), 0, 24 * 3600 * 1000));
}

std::optional<Trigger> Triggers::read_signal() {
  signalfd_siginfo info{};
  if (::read(signal_fd_.fd, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) return std::nullopt;
  const int signal = static_cast<int>(info.ssi_signo);
  if (signal == SIGTERM || signal == SIGINT) return Trigger{Trigger::Kind::kStop, std::string(kSignalNames.name(signal))};
  return Trigger{Trigger::Kind::kSignal, "SIGHUP"};
}

void Triggers::read_changes() {
  alignas(inotify_event) char buffer[4096];
  while (true) {
    const ssize_t n = ::read(inotify_fd_.fd, buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      const auto w = watches_.find(event->wd);
      if (w == watches_.end() || event->len == 0 || !changed_.empty()) continue;
      const std::string name = event->name;
      const auto& names = w->second.names;
      if (std::find(names.begin(), names.end(), name) != names.end()) changed_ = (w->second.dir / name).string();
    }
  }
}

Trigger Triggers::begin(Trigger trigger) {
  started_ = Clock::now();
  changed_.clear();
  return trigger;
}

}  // namespace numaserve::agent::updater
