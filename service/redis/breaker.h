#pragma once
// The Redis client's circuit breaker, apart from any socket or clock: closed
// lets every pipeline through; after `failures` in a row it opens and
// refuses at once for `open_seconds`, so a dead or slow Redis costs a
// request nothing instead of its whole deadline; then one pipeline probes
// (half open) and its outcome closes the breaker or opens it again. Time is
// handed in, so its rules are tested without waiting.

#include <atomic>
#include <chrono>

#include "numaserve/common/duration.h"
#include "numaserve/common/names.h"

namespace numaserve::redis {

enum class BreakerState { kClosed, kOpen, kHalfOpen };
// As numaserve_feature_store_breaker{state=...} says them.
inline constexpr auto kBreakerStateNames = make_names<BreakerState>(
    {{BreakerState::kClosed, "closed"}, {BreakerState::kOpen, "open"}, {BreakerState::kHalfOpen, "half_open"}});

class Breaker {
 public:
  using Clock = std::chrono::steady_clock;
  Breaker(unsigned failures, double open_seconds) : failures_(failures), open_for_(to_duration(open_seconds)) {}

  // May a pipeline go at `now`? An open breaker whose time is up lets one
  // through, the probe.
  bool admit(Clock::time_point now) {
    switch (state_.load(std::memory_order_relaxed)) {
      case BreakerState::kClosed: return true;
      case BreakerState::kHalfOpen: return false;  // the probe is out
      case BreakerState::kOpen:
        if (now < open_until_) return false;
        state_.store(BreakerState::kHalfOpen, std::memory_order_relaxed);
        return true;
    }
    return true;
  }

  // A pipeline that went came back `ok` (or failed) at `now`; true when the
  // state changed (the client logs it).
  bool record(bool ok, Clock::time_point now) {
    const BreakerState state = state_.load(std::memory_order_relaxed);
    if (ok) {
      failures_in_row_ = 0;
      if (state == BreakerState::kClosed) return false;
      state_.store(BreakerState::kClosed, std::memory_order_relaxed);
      return true;
    }
    ++failures_in_row_;
    if (state == BreakerState::kHalfOpen || (state == BreakerState::kClosed && failures_in_row_ >= failures_)) {
      state_.store(BreakerState::kOpen, std::memory_order_relaxed);
      open_until_ = now + open_for_;
      return true;
    }
    return false;
  }

  // A connection just made (the server restarted, a new one dialled): an
  // open breaker lets the next pipeline probe at once instead of waiting
  // out its time, since what failed was most likely the connection now gone.
  void connected(Clock::time_point now) {
    if (state_.load(std::memory_order_relaxed) == BreakerState::kOpen) open_until_ = now;
  }

  // Any thread (/metrics); the rest only the client's loop thread.
  BreakerState state() const { return state_.load(std::memory_order_relaxed); }
  unsigned failures_in_row() const { return failures_in_row_; }

 private:
  const unsigned failures_;
  const Clock::duration open_for_;
  std::atomic<BreakerState> state_{BreakerState::kClosed};
  unsigned failures_in_row_ = 0;
  Clock::time_point open_until_;
};

}  // namespace numaserve::redis
