// The benchmark's HTTP client. cpp-httplib is confined to service/http/ in
// the product; this tool is a client of the product, not part of it.
#include "loadgen.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace numaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

LoadResult run_load(const LoadConfig& config) {
  const auto start = Clock::now();
  const auto measure_from = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.warmup_seconds));
  const auto end = measure_from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.seconds));
  const bool open_loop = config.rate > 0;
  const auto interval = open_loop ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / config.rate))
                                  : Clock::duration{};

  std::mutex mutex;
  LoadResult result;
  std::vector<double> latencies_ms;
  std::atomic<std::size_t> next{0};  // open loop: index of the next due request; both: body index
  std::vector<std::thread> clients;
  for (std::size_t c = 0; c < config.connections; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client(config.host, config.port);
      client.set_keep_alive(true);
      // Headers and body go out in two writes; with Nagle on, the body waits
      // for the ACK the server delays by 40 ms.
      client.set_tcp_nodelay(true);
      client.set_read_timeout(30, 0);
      std::size_t mine = c;
      while (true) {
        Clock::time_point due;
        std::size_t index;
        if (open_loop) {
          index = next++;
          due = start + interval * static_cast<long>(index);
          if (due >= end) return;
          std::this_thread::sleep_until(due);
        } else {
          index = mine;
          mine += config.connections;
          due = Clock::now();
          if (due >= end) return;
        }
        const auto sent = Clock::now();
        auto res = client.Post(config.path, config.bodies[index % config.bodies.size()], "application/json");
        const auto done = Clock::now();
        if (due < measure_from || done > end) continue;
        std::lock_guard lock(mutex);
        const int status = res ? res->status : 0;
        ++result.statuses[status];
        if (status == 200) {
          ++result.requests;
          latencies_ms.push_back(std::chrono::duration<double, std::milli>(done - due).count());
        } else {
          ++result.errors;
        }
        if (sent - due > std::chrono::milliseconds(1)) ++result.late;
      }
    });
  }
  for (auto& t : clients) t.join();
  result.seconds = config.seconds;
  result.requests_per_second = static_cast<double>(result.requests) / config.seconds;
  std::sort(latencies_ms.begin(), latencies_ms.end());
  result.p50_ms = percentile(latencies_ms, 0.50);
  result.p90_ms = percentile(latencies_ms, 0.90);
  result.p99_ms = percentile(latencies_ms, 0.99);
  result.max_ms = latencies_ms.empty() ? 0 : latencies_ms.back();
  return result;
}

}  // namespace numaserve::bench
