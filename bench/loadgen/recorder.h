#pragma once
// What the load generator's loops (HTTP's, gRPC's) record, in the measured
// window only: a status per request (HTTP's; a gRPC call's OK is 200) and
// its latency from when it was due. Private to loadgen/.

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "loadgen.h"

namespace numaserve::bench {

using Clock = std::chrono::steady_clock;

inline Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

inline double percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// What both loops record, in the measured window only.
struct Recorder {
  Clock::time_point measure_from, end;
  LoadResult result;
  std::map<int, std::vector<double>> latencies_ms;  // per status
  bool by_class = false;
  std::map<std::size_t, std::map<int, std::vector<double>>> class_latencies_ms;  // per class, per status

  void record(Clock::time_point due, Clock::time_point sent, Clock::time_point done, int status, bool cut = false,
              std::size_t cls = 0) {
    if (due < measure_from || done > end) return;
    ++result.statuses[status];
    if (cut) ++result.cut;
    (status == 200 ? result.requests : result.errors) += 1;
    const double ms = std::chrono::duration<double, std::milli>(done - due).count();
    latencies_ms[status].push_back(ms);
    if (by_class) class_latencies_ms[cls][status].push_back(ms);
    if (sent - due > std::chrono::milliseconds(1)) ++result.late;
  }

  static Latencies summary(std::vector<double>& ms) {
    std::sort(ms.begin(), ms.end());
    return {ms.size(), percentile(ms, 0.50), percentile(ms, 0.90), percentile(ms, 0.99), ms.back()};
  }

  LoadResult finish(double window_seconds) {
    result.seconds = window_seconds;
    result.requests_per_second = static_cast<double>(result.requests) / window_seconds;
    for (auto& [status, ms] : latencies_ms) result.latencies[status] = summary(ms);
    for (auto& [cls, statuses] : class_latencies_ms) {
      for (auto& [status, ms] : statuses) result.by_class[cls].latencies[status] = summary(ms);
    }
    const Latencies ok = result.latencies.count(200) ? result.latencies[200] : Latencies{};
    result.p50_ms = ok.p50_ms;
    result.p90_ms = ok.p90_ms;
    result.p99_ms = ok.p99_ms;
    result.max_ms = ok.max_ms;
    return result;
  }
};

}  // namespace numaserve::bench
