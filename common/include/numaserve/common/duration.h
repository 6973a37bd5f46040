#pragma once
// Seconds <-> std::chrono durations, in one place. People, option tables and
// JSON speak seconds as doubles ("250ms", 0.5); clocks, poll() and sleeps
// speak integer ticks. Every conversion between the two goes through here,
// so the rounding is the same everywhere: toward zero, as duration_cast does.

#include <chrono>

namespace numaserve {

using Seconds = std::chrono::duration<double>;

// `seconds` as a duration of D, the steady clock's ticks unless asked
// otherwise. Assumes |seconds| fits D (options cap it at kMaxSeconds, 1e9 s,
// which fits a nanosecond count).
template <class D = std::chrono::steady_clock::duration>
constexpr D to_duration(double seconds) {
  return std::chrono::duration_cast<D>(Seconds(seconds));
}

// Any duration (or a time point's time_since_epoch()) in seconds.
template <class Rep, class Period>
constexpr double to_seconds(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration_cast<Seconds>(d).count();
}

}  // namespace numaserve
