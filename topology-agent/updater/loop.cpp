#include "updater/loop.h"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "numaserve/common/log.h"
#include "numaserve/common/unique_fd.h"

namespace numaserve::agent::updater {
namespace {

using Clock = std::chrono::steady_clock;


// inotify over a few directories, reporting only the names asked for.
class Watcher {
 public:
  explicit Watcher(const std::vector<Watched>& watched) : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    if (fd_.fd < 0) {
      log(LogLevel::kWarning, "inotify unavailable; relying on the interval", {{"error", std::strerror(errno)}});
      return;
    }
    for (const auto& w : watched) {
      // Writes in place, atomic renames, touches, and a socket recreated.
      const int wd = ::inotify_add_watch(fd_.fd, w.dir.c_str(),
                                         IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ATTRIB);
      if (wd < 0) {
        log(LogLevel::kWarning, "cannot watch; relying on the interval",
            {{"dir", w.dir.string()}, {"error", std::strerror(errno)}});
        continue;
      }
      watches_[wd] = w;
    }
  }

  int fd() const { return fd_.fd; }

  // Drains the queue; the first watched file that changed, or "".
  std::string drain() {
    std::string changed;
    alignas(inotify_event) char buffer[4096];
    while (true) {
      const ssize_t n = ::read(fd_.fd, buffer, sizeof buffer);
      if (n <= 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        const auto w = watches_.find(event->wd);
        if (w == watches_.end() || event->len == 0 || !changed.empty()) continue;
        const std::string name = event->name;
        const auto& names = w->second.names;
        if (std::find(names.begin(), names.end(), name) != names.end()) changed = (w->second.dir / name).string();
      }
    }
    return changed;
  }

 private:
  UniqueFd fd_;
  std::map<int, Watched> watches_;
};

}  // namespace

std::vector<Watched> kubelet_watches(const discover::DiscoverConfig& config) {
  std::vector<Watched> out;
  if (config.kubelet_state_dir) {
    out.push_back({*config.kubelet_state_dir, {"cpu_manager_state", "memory_manager_state", "kubelet_internal_checkpoint"}});
  }
  if (config.podresources) {
    const auto& socket = config.podresources->socket;
    out.push_back({socket.has_parent_path() ? socket.parent_path() : ".", {socket.filename().string()}});
  }
  return out;
}

Status run_loop(Updater& updater, const LoopConfig& config, const OnCycle& on_cycle) {
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&signals, s);
  UniqueFd signal_fd(::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (signal_fd.fd < 0) {
    return make_error(Error::Code::kInternal, std::string("signalfd: ") + std::strerror(errno));
  }
  Watcher watcher(config.watched);
  const auto interval = std::chrono::duration_cast<Clock::duration>(config.interval);
  const auto min_gap = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(1.0 / config.max_events_per_second));

  std::string reason = "start";
  std::string changed;  // a change seen, not yet cycled on
  while (true) {
    const Clock::time_point started = Clock::now();
    on_cycle(updater.run_cycle(), reason);
    const Clock::time_point periodic = started + interval;
    while (true) {
      // A change runs a cycle at once, unless the last one was under min_gap ago.
      const Clock::time_point due = changed.empty() ? periodic : std::min(periodic, started + min_gap);
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(due - Clock::now());
      pollfd fds[2] = {{signal_fd.fd, POLLIN, 0}, {watcher.fd(), POLLIN, 0}};
      const int ready = ::poll(fds, watcher.fd() >= 0 ? 2 : 1,
                               static_cast<int>(std::clamp<std::int64_t>(wait.count(), 0, 24 * 3600 * 1000)));
      if (ready < 0 && errno != EINTR) {
        return make_error(Error::Code::kInternal, std::string("poll: ") + std::strerror(errno));
      }
      if (ready > 0 && (fds[0].revents & POLLIN)) {
        signalfd_siginfo info{};
        if (::read(signal_fd.fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
          if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) {
            log(LogLevel::kInfo, "stopping", {{"signal", info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT"}});
            return {};
          }
          reason = "SIGHUP";
          break;
        }
      }
      if (ready > 0 && watcher.fd() >= 0 && (fds[1].revents & POLLIN)) {
        if (std::string file = watcher.drain(); !file.empty() && changed.empty()) changed = std::move(file);
      }
      const Clock::time_point now = Clock::now();
      if (!changed.empty() && now >= started + min_gap) {
        reason = "changed " + changed;
        break;
      }
      if (now >= periodic) {
        reason = "interval";
        break;
      }
    }
    changed.clear();
  }
}

}  // namespace numaserve::agent::updater
