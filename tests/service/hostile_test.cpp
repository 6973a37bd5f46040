// The real binary in a hostile world, over loopback only, every phase
// bounded in time: ten thousand idle connections and a thousand slowloris
// clients at once, connections beyond --max-connections, all the load on
// one worker's connections, and an open-loop flood at three times
// saturation. Torch-free: the demo models are made by the binary itself.
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "loadgen.h"
#include "raw_http.h"
#include "served.h"

namespace numaserve::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Served serve(std::vector<std::string> extra, int cpu = -1) {
  const auto& models = tiny_demo_models();
  std::vector<std::string> args = {"serve",       "--model-dir", (models / "ranker_a").string(), "--feature-store",
                                   (models / "store.jsonl").string(), "--port", "0", "--listen-address",
                                   "127.0.0.1", "--warmup-rounds", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return start_served(NUMASERVE_BINARY, args, "msg=ready", cpu);
}

struct Stop {
  pid_t pid;
  ~Stop() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      wait_exit(pid, 30);
    }
  }
};

std::string predict_body(int items) {
  std::string body = R"({"user": {"id": "u1"}, "items": [)";
  for (int i = 0; i < items; ++i) body += (i ? "," : "") + std::string(R"({"id": "i)") + std::to_string(i % 200) + "\"}";
  return body + "]}";
}

// The service's /metrics as series -> value ("name{labels}" as written).
std::map<std::string, double> scrape(RawConnection& c) {
  std::map<std::string, double> out;
  if (!c.send(get("/metrics"))) return out;
  auto response = c.read_response();
  if (!response) return out;
  std::istringstream lines(response->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

double worker_metric(const std::map<std::string, double>& m, const std::string& name, int worker) {
  const auto it = m.find(name + "{worker=\"" + std::to_string(worker) + "\"}");
  return it == m.end() ? 0 : it->second;
}

std::size_t resident_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// Room for this many more descriptors in this process, raising the soft
// limit to the hard one; false when even that is too low.
bool descriptors_for(std::size_t wanted) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted + 256;
}

// Waits until every socket in `fds` is closed by the server (readable with
// nothing, or a reply and then nothing); their close times, in the order of `fds`.
std::vector<Clock::time_point> closes(const std::vector<int>& fds, Clock::time_point deadline) {
  std::vector<Clock::time_point> when(fds.size(), Clock::time_point::max());
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  for (std::size_t i = 0; i < fds.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
  }
  std::size_t open = fds.size();
  std::vector<epoll_event> events(1024);
  char sink[4096];
  while (open > 0 && Clock::now() < deadline) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 50);
    for (int k = 0; k < n; ++k) {
      const auto i = events[k].data.u64;
      ssize_t got = 0;
      while ((got = recv(fds[i], sink, sizeof sink, MSG_DONTWAIT)) > 0) {
      }
      if (got == 0 || (got < 0 && errno != EAGAIN)) {
        when[i] = Clock::now();
        epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], nullptr);
        --open;
      }
    }
  }
  ::close(ep);
  return when;
}

TEST(Hostile, TenThousandIdleAndAThousandSlowConnectionsLeaveHealthAndPredictServed) {
  constexpr std::size_t kIdle = 10000, kSlow = 1000;
  if (!descriptors_for(kIdle + kSlow + 16)) GTEST_SKIP() << "the descriptor limit here is below " << kIdle + kSlow;
  const Served s = serve({"--workers", "2", "--header-timeout", "3s", "--idle-timeout", "10s"});
  ASSERT_GT(s.pid, 0);
  Stop stop{s.pid};
  RawConnection probe(s.port);
  ASSERT_TRUE(probe.send(get("/healthz")) && probe.read_response());
  const std::size_t rss_before = resident_bytes(s.pid);

  // The idle flood: connected, never a byte.
  std::vector<RawConnection> idle;
  idle.reserve(kIdle);
  const auto idle_opened = Clock::now();
  for (std::size_t i = 0; i < kIdle; ++i) {
    idle.emplace_back(s.port);
    ASSERT_TRUE(idle.back().connected()) << i;
  }
  double open = 0;
  for (auto until = Clock::now() + 20s; Clock::now() < until && open < kIdle + 1;) {
    const auto m = scrape(probe);
    open = worker_metric(m, "numaserve_worker_connections", 0) + worker_metric(m, "numaserve_worker_connections", 1);
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_GE(open, kIdle + 1.0) << "the server did not take every connection";
  const double per_connection = static_cast<double>(resident_bytes(s.pid) - rss_before) / kIdle;
  std::cout << "RSS growth per idle connection: " << per_connection << " bytes\n";
  RecordProperty("rss_bytes_per_idle_connection", std::to_string(per_connection));
  EXPECT_LT(per_connection, 10 * 1024);

  // The slow flood: a request line, then one header byte a second each.
  std::vector<RawConnection> slow;
  slow.reserve(kSlow);
  const auto slow_opened = Clock::now();
  for (std::size_t i = 0; i < kSlow; ++i) {
    slow.emplace_back(s.port);
    ASSERT_TRUE(slow.back().send("GET /healthz HTTP/1.1\r\nX-Slow: "));
  }
  std::atomic<bool> dribbling{true};
  std::thread dribbler([&] {
    while (dribbling) {
      std::this_thread::sleep_for(1s);
      for (auto& c : slow) ::send(c.fd(), "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  });

  // Meanwhile: /healthz on a fresh connection, and /predict.
  std::vector<double> health_ms;
  RawConnection client(s.port);
  for (int i = 0; i < 200; ++i) {
    const auto t = Clock::now();
    ASSERT_TRUE(client.send(get("/healthz")));
    auto response = client.read_response(5s);
    ASSERT_TRUE(response) << i;
    EXPECT_EQ(response->status, 200);
    health_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    if (i % 10 == 0) {
      ASSERT_TRUE(client.send(post("/predict", predict_body(50))));
      auto predicted = client.read_response(5s);
      ASSERT_TRUE(predicted);
      EXPECT_EQ(predicted->status, 200) << predicted->body;
    }
    std::this_thread::sleep_for(5ms);
  }
  const double p99 = percentile(health_ms, 0.99);
  std::cout << "/healthz beside " << kIdle << " idle and " << kSlow << " slow connections: p50 "
            << percentile(health_ms, 0.5) << " ms, p99 " << p99 << " ms\n";
  EXPECT_LT(p99, 50.0);

  // The slow ones end at their header deadline (3 s, swept every 0.3 s) with a 408.
  std::vector<int> slow_fds;
  for (auto& c : slow) slow_fds.push_back(c.fd());
  const auto slow_closed = closes(slow_fds, slow_opened + 8s);
  dribbling = false;
  dribbler.join();
  for (std::size_t i = 0; i < kSlow; ++i) {
    ASSERT_NE(slow_closed[i], Clock::time_point::max()) << "slow connection " << i << " still open";
    EXPECT_GE(slow_closed[i] - slow_opened, 2900ms) << i;
    EXPECT_LT(slow_closed[i] - slow_opened, 6s) << i;
  }
  // The idle ones at their idle timeout (10 s), not before.
  std::vector<int> idle_fds;
  for (auto& c : idle) idle_fds.push_back(c.fd());
  const auto idle_closed = closes(idle_fds, idle_opened + 16s);
  std::size_t early = 0, never = 0;
  auto first_close = Clock::time_point::max();
  for (const auto& t : idle_closed) {
    never += t == Clock::time_point::max();
    early += t != Clock::time_point::max() && t - idle_opened < 9500ms;
    first_close = std::min(first_close, t);
  }
  EXPECT_EQ(never, 0u);
  EXPECT_EQ(early, 0u) << "the first idle connection closed "
                       << std::chrono::duration<double>(first_close - idle_opened).count() << " s after the flood began";
  RawConnection last(s.port);
  const auto m = scrape(last);
  EXPECT_GE(m.at("numaserve_http_connections_closed_total{reason=\"idle\"}"), kIdle);
  EXPECT_GE(m.at("numaserve_http_connections_closed_total{reason=\"timeout\"}"), kSlow);
}

TEST(Hostile, AConnectionBeyondMaxConnectionsGets503AndIsClosed) {
  const Served s = serve({"--workers", "1", "--max-connections", "4"});
  ASSERT_GT(s.pid, 0);
  Stop stop{s.pid};
  std::vector<RawConnection> held;
  for (int i = 0; i < 4; ++i) {
    held.emplace_back(s.port);
    ASSERT_TRUE(held.back().send(get("/healthz")));
    ASSERT_EQ(held.back().read_response()->status, 200);
  }
  RawConnection beyond(s.port);
  beyond.send(get("/healthz"));
  auto refused = beyond.read_response();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->header("connection"), "close");
  EXPECT_NE(refused->body.find("too many connections"), std::string::npos) << refused->body;
  EXPECT_TRUE(beyond.wait_closed(2s));
  EXPECT_EQ(scrape(held[0]).at("numaserve_http_connections_refused_total"), 1);
}

// Which worker owns `c`: the one whose read counter moves when `c` asks
// something. `metrics` is a connection of worker `metrics_owner`, whose
// counter moves by the scrape itself.
int owner(RawConnection& c, RawConnection& metrics, int metrics_owner) {
  const auto before = scrape(metrics);
  if (c.send(get("/healthz"))) c.read_response();
  const auto after = scrape(metrics);
  for (int w = 0; w < 2; ++w) {
    const double moved = worker_metric(after, "numaserve_worker_requests_read_total", w) -
                         worker_metric(before, "numaserve_worker_requests_read_total", w) - (w == metrics_owner);
    if (moved == 1) return w;
  }
  return -1;
}

TEST(Balance, LoadOnOneWorkersConnectionsStillUsesEveryWorker) {
  const Served s = serve({"--workers", "2"});
  ASSERT_GT(s.pid, 0);
  Stop stop{s.pid};
  RawConnection metrics(s.port);
  // The scrapes' own worker: the one whose counter moves between two of them.
  const auto first = scrape(metrics), second = scrape(metrics);
  int metrics_owner = -1;
  for (int w = 0; w < 2; ++w) {
    if (worker_metric(second, "numaserve_worker_requests_read_total", w) -
            worker_metric(first, "numaserve_worker_requests_read_total", w) ==
        1) {
      metrics_owner = w;
    }
  }
  ASSERT_GE(metrics_owner, 0);
  // Keep four connections owned by worker 0.
  std::vector<RawConnection> mine;
  for (int i = 0; i < 40 && mine.size() < 4; ++i) {
    RawConnection c(s.port);
    if (owner(c, metrics, metrics_owner) == 0) mine.push_back(std::move(c));
  }
  ASSERT_EQ(mine.size(), 4u);
  const auto before = scrape(metrics);
  // Each request about a forward's worth of rows (--max-batch-items 1024):
  // while worker 0 runs one, the others wait in its queue.
  const std::string body = predict_body(1000);
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (auto& c : mine) {
    clients.emplace_back([&c, &body, &failures] {
      for (auto until = Clock::now() + 3s; Clock::now() < until;) {
        c.send(post("/predict", body));
        auto r = c.read_response();
        if (!r || r->status != 200) ++failures;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures, 0);
  const auto after = scrape(metrics);
  auto delta = [&](const char* name, int w) { return worker_metric(after, name, w) - worker_metric(before, name, w); };
  const double read0 = delta("numaserve_worker_requests_read_total", 0);
  const double ran0 = delta("numaserve_worker_forward_requests_total", 0);
  const double ran1 = delta("numaserve_worker_forward_requests_total", 1);
  std::cout << "worker 0 read " << read0 << " requests and ran " << ran0 << "; worker 1 read "
            << delta("numaserve_worker_requests_read_total", 1) << " (the scrapes) and ran " << ran1 << ", stole "
            << delta("numaserve_worker_stolen_requests_total", 1) << "\n";
  EXPECT_GT(read0, 100);
  EXPECT_GE(ran1, 0.2 * (ran0 + ran1)) << "worker 1 stood idle while worker 0's connections were busy";
  EXPECT_EQ(delta("numaserve_worker_stolen_requests_total", 1), ran1);
}

// This thread (the load generator's) on `cpu` while in scope, where the
// machine has it; the tests after this one get their CPUs back.
class RunOn {
 public:
  explicit RunOn(unsigned cpu) {
    if (std::thread::hardware_concurrency() <= cpu || sched_getaffinity(0, sizeof saved_, &saved_) != 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pinned_ = sched_setaffinity(0, sizeof set, &set) == 0;
  }
  ~RunOn() {
    if (pinned_) {
      EXPECT_EQ(sched_setaffinity(0, sizeof saved_, &saved_), 0);
    }
  }
  RunOn(const RunOn&) = delete;
  RunOn& operator=(const RunOn&) = delete;

 private:
  cpu_set_t saved_{};
  bool pinned_ = false;
};

TEST(Overload, ThreeTimesSaturationGets200Or503AndThe503sAreFast) {
  // One worker on CPU 0, the load (the benchmark's generator) on the other
  // CPU where there is one.
  // Forwards of one 1,000-item request each: a 503 waits at most for the
  // forward that runs when it arrives. A queue of 32 makes a served
  // request's wait (the queue ahead of it) many forwards long, so the two
  // stay apart however fast the forward is (with 16, the fused forward's
  // 200s waited 13 ms at p50, the 503s 7 ms at p99 on a busy turn).
  const Served s =
      serve({"--workers", "1", "--queue-capacity", "32", "--max-queue-delay", "50ms", "--max-batch-items", "1000"}, 0);
  ASSERT_GT(s.pid, 0);
  Stop stop{s.pid};
  const RunOn load_cpu(1);
  bench::LoadConfig load;
  load.port = s.port;
  // 1,000 items: the load generator (one CPU, a request's cost nearly
  // independent of its size) keeps up with 3x the saturation of a server
  // whose forward runs ~1M items/s; with 500 items it fell behind, and its
  // lateness counted in the 200s' latency.
  load.bodies = {predict_body(1000)};
  load.connections = 8;
  load.warmup_seconds = 0.5;
  load.seconds = 2;
  const double saturation = bench::run_load(load).requests_per_second;  // closed loop
  ASSERT_GT(saturation, 10);

  load.rate = 3 * saturation;
  load.connections = 512;
  load.warmup_seconds = 0;
  load.seconds = 10;
  const auto r = bench::run_load(load);
  const auto count = [&r](int status) { return r.statuses.count(status) ? r.statuses.at(status) : 0; };
  std::size_t answered = 0;
  for (const auto& [status, n] : r.statuses) answered += n;
  std::cout << "saturation " << saturation << " req/s; at 3x: " << count(200) << " x 200 (p50 "
            << r.latencies.at(200).p50_ms << " ms, p99 " << r.latencies.at(200).p99_ms << " ms, max "
            << r.latencies.at(200).max_ms << " ms), " << count(503) << " x 503 (p50 " << r.latencies.at(503).p50_ms
            << " ms, p99 " << r.latencies.at(503).p99_ms << " ms), " << count(0) << " not sent or not answered (" << r.cut
            << " sent and cut, " << r.late << " late)\n";
  // The server's part: what was sent is answered. A request never sent
  // (the generator, on one CPU, behind its schedule) is the generator's;
  // enough were sent for an overload: at least twice the saturation.
  EXPECT_LT(static_cast<double>(r.cut), 0.01 * static_cast<double>(answered)) << "requests sent and not answered";
  EXPECT_GT(static_cast<double>(count(200) + count(503)), 2 * saturation * load.seconds) << "the load was no overload";
  EXPECT_EQ(count(200) + count(503) + count(0), answered) << "a status other than 200 or 503";
  EXPECT_GT(count(503), 0u);
  EXPECT_GT(count(200), 0u);
  // Refused at once, not after a wait in the queue: a 503 takes at most the
  // forward running when it arrives, a 200 its wait in the queue besides
  // (the queue stays full at 3x). Compared within the run, not to a fixed
  // time, and by medians: a queued 503 would wait like a served request at
  // every percentile, while this kind of guest stalls the whole process for
  // tens of milliseconds now and then, which reaches a percent of either
  // (a CI run here: 503s 34 ms at p99 after a stall, the 200s' median 20 ms).
  EXPECT_LT(r.latencies.at(503).p50_ms, 0.25 * r.latencies.at(200).p50_ms) << "a 503 waited like a served request";
  // A 200 waited at most the queue delay (50 ms), plus its own forward and
  // what the loop ran before it: well under 50 + 50 ms (p99: the same
  // stalls put a few above that in a noisy run).
  EXPECT_LT(r.latencies.at(200).p99_ms, 100.0);
}

}  // namespace
}  // namespace numaserve::testing
