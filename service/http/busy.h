#pragma once
// How busy an event loop's thread is: the CPU time it used over the wall
// time that passed, as an exponential average over a window (each sample
// weighted by the time it covers). A saturation signal for autoscaling: on
// exclusive, pinned cores a saturated replica and one with a long queue
// both show 100% CPU in the pod's metrics, but this share is the worker's
// own thread (its loop, its forwards, the system calls it makes), about
// the offered load over the saturation rate below saturation.
//
// Sampled by the loop's own thread (its sweep, a few times a second: a CPU
// clock read per turn would cost a system call each); read by any thread.
// CPU time, not the time outside the loop's wait: asio runs the first
// handler inside the call that waits, so the wait's edges are not the
// loop's idle time.

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

namespace numaserve::http {

class BusyShare {
 public:
  using Clock = std::chrono::steady_clock;
  explicit BusyShare(double window_seconds = 5) : window_(window_seconds) {}

  // `cpu_seconds`: the thread's CPU time so far (thread_cpu_seconds()). The
  // first sample only starts the count.
  void sample(Clock::time_point now, double cpu_seconds) {
    if (started_) {
      const double wall = std::chrono::duration<double>(now - last_wall_).count();
      if (wall <= 0) return;
      const double share = std::clamp((cpu_seconds - last_cpu_) / wall, 0.0, 1.0);
      const double keep = std::exp(-wall / window_);
      share_.store(share_.load(std::memory_order_relaxed) * keep + (1 - keep) * share, std::memory_order_relaxed);
    }
    started_ = true;
    last_wall_ = now;
    last_cpu_ = cpu_seconds;
  }
  double share() const { return share_.load(std::memory_order_relaxed); }

  // The calling thread's CPU time, user and system.
  static double thread_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }

 private:
  const double window_;
  std::atomic<double> share_{0};
  // The sampling thread's own.
  bool started_ = false;
  Clock::time_point last_wall_;
  double last_cpu_ = 0;
};

}  // namespace numaserve::http
