#pragma once
// Why the agent's next cycle runs. Three things start one: a signal (SIGHUP
// at once; SIGTERM or SIGINT stop the loop instead), a change to one of the
// kubelet's watched files (inotify; at most max_events_per_second cycles a
// second, so a burst of writes is one cycle), and the interval. Triggers
// owns the signalfd, the inotify watches and the timer; the loop only asks
// next() and runs a cycle on every answer but kStop.

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/result.h"
#include "numaserve/common/unique_fd.h"

namespace numaserve::agent::updater {

// A directory to watch and the file names in it whose changes count.
struct Watched {
  std::filesystem::path dir;
  std::vector<std::string> names;
};

// When cycles run: the loop has no other settings.
struct LoopConfig {
  std::chrono::duration<double> interval{60};
  double max_events_per_second = 1;
  std::vector<Watched> watched;
};

struct Trigger {
  enum class Kind { kStart, kSignal, kFileChanged, kInterval, kStop };
  Kind kind = Kind::kStart;
  // As the cycle's log line gives it: "start", "SIGHUP", "changed <file>",
  // "interval"; for kStop, the signal ("SIGTERM", "SIGINT").
  std::string reason = "start";
};

class Triggers {
 public:
  // The signals must already be blocked in every thread (block_signals()),
  // or they would kill the process before the signalfd reads them. A
  // directory that cannot be watched is logged and left to the interval.
  static Result<Triggers> open(const LoopConfig& config);

  // Blocks until the next cycle is due and says why. The interval and the
  // events' minimum gap count from the previous trigger (or open()): the
  // caller runs its cycle right after each one.
  Result<Trigger> next();

 private:
  using Clock = std::chrono::steady_clock;

  Triggers(UniqueFd signal_fd, UniqueFd inotify_fd, const LoopConfig& config);
  void watch(const std::vector<Watched>& watched);
  int poll_timeout_ms() const;
  // A signal read from the signalfd, if one was there.
  std::optional<Trigger> read_signal();
  // Drains inotify's queue, keeping the first watched file that changed.
  void read_changes();
  // `trigger`, with the next cycle's clock started now.
  Trigger begin(Trigger trigger);

  UniqueFd signal_fd_;
  UniqueFd inotify_fd_;  // -1 without inotify: the interval and signals only
  std::map<int, Watched> watches_;  // by watch descriptor
  Clock::duration interval_;
  Clock::duration min_gap_;  // between cycles that file changes start
  Clock::time_point started_;  // of the cycle now running
  std::string changed_;  // a change seen, not yet cycled on
};

// Blocks SIGHUP, SIGTERM and SIGINT in the calling thread and every thread
// it starts afterwards, so that only the triggers' signalfd sees them.
void block_signals();

}  // namespace numaserve::agent::updater
