// The real binary stopped as every rollout, scale-down and node drain stops
// it: keep-alive clients in a closed loop, SIGTERM under their load. Each
// request is answered (200), refused (the port is closed: the client goes
// elsewhere) or broken (the connection closed under a request the client
// had sent) — and a broken request is lost, as most clients do not retry a
// POST. Torch-free: the demo models are made by the binary itself; loopback
// only, every wait bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "raw_http.h"
#include "served.h"

namespace numaserve::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Served serve(std::vector<std::string> extra) {
  const auto& models = tiny_demo_models();
  std::vector<std::string> args = {"serve",       "--model-dir", (models / "ranker_a").string(), "--feature-store",
                                   (models / "store.jsonl").string(), "--port", "0", "--listen-address",
                                   "127.0.0.1", "--warmup-rounds", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return start_served(NUMASERVE_BINARY, args, "msg=ready");
}

std::string predict_request(int items) {
  std::string body = R"({"user": {"id": "u1"}, "items": [)";
  for (int i = 0; i < items; ++i) body += (i ? "," : "") + std::string(R"({"id": "i)") + std::to_string(i % 200) + "\"}";
  return post("/predict", body + "]}", "Content-Type: application/json\r\n");
}

// The drain may close a connection that sat idle this long (the test gives
// --shutdown-idle twice as much); a request sent on one later is "stale",
// not broken: the race every keep-alive client has with an idle timeout.
constexpr auto kStaleAfter = 250ms;

struct Tally {
  int answered = 0;
  int refused = 0;
  int broken = 0;
  int stale = 0;
  int kept_alive_after_term = 0;  // replies to requests sent well after SIGTERM without Connection: close
};

// `clients` keep-alive clients in a closed loop until their connect is
// refused; SIGTERM once each has been answered `warm` times. Returns what
// the clients saw and the process's exit status.
std::pair<Tally, int> stop_under_load(const std::vector<std::string>& options, int clients, int warm) {
  Tally total;
  const Served s = serve(options);
  if (s.pid <= 0) return {total, -1};
  const std::string request = predict_request(200);
  std::mutex mutex;
  std::atomic<int> warmed{0};
  std::atomic<Clock::rep> term_at{Clock::time_point::max().time_since_epoch().count()};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      Tally t;
      int answered_here = 0;
      std::mt19937 rng(static_cast<unsigned>(c));
      std::uniform_int_distribution<int> think(0, 2000);
      std::optional<RawConnection> connection;
      Clock::time_point idle_since;
      const auto give_up = Clock::now() + 60s;
      while (Clock::now() < give_up) {
        if (!connection) {
          connection.emplace(s.port);
          idle_since = Clock::now();
          if (!connection->connected()) {
            ++t.refused;  // the port is closed: this client goes elsewhere
            break;
          }
        }
        // A client's own work between a reply and its next request: the
        // moment the drain must not close a connection in.
        std::this_thread::sleep_for(std::chrono::microseconds(think(rng)));
        const auto sent = Clock::now();
        const bool stale = sent - idle_since >= kStaleAfter;
        std::optional<RawResponse> reply;
        if (connection->send(request)) reply = connection->read_response(10s);
        if (!reply) {
          ++(stale ? t.stale : t.broken);
          connection.reset();
          continue;
        }
        EXPECT_EQ(reply->status, 200) << reply->body;
        ++t.answered;
        if (++answered_here == warm) ++warmed;
        const bool close = reply->header("connection") == "close";
        const Clock::time_point term{Clock::duration(term_at.load())};
        if (!close && term != Clock::time_point::max() && sent > term + 50ms) ++t.kept_alive_after_term;
        if (close) {
          connection.reset();
        } else {
          idle_since = Clock::now();
        }
      }
      std::lock_guard lock(mutex);
      total.answered += t.answered;
      total.refused += t.refused;
      total.broken += t.broken;
      total.stale += t.stale;
      total.kept_alive_after_term += t.kept_alive_after_term;
    });
  }
  for (const auto deadline = Clock::now() + 30s; warmed < clients && Clock::now() < deadline;) {
    std::this_thread::sleep_for(5ms);
  }
  term_at = Clock::now().time_since_epoch().count();
  kill(s.pid, SIGTERM);
  const int rc = wait_exit(s.pid, 40);
  for (auto& t : threads) t.join();
  if (rc != 0) ADD_FAILURE() << slurp(s.log);
  return {total, rc};
}

// 16 clients, SIGTERM, several times with and without a delay: the race of
// a close with a request already on its way happens at most once per
// connection and shutdown, so it takes repeated shutdowns (~100 connections
// drained here) to show; each client thinks 0-2 ms between a reply and its
// next request, as a real one does. Before the fix: 36-49 broken per run.
TEST(Shutdown, KeepAliveClientsUnderLoadLoseNoRequest) {
  Tally sum;
  for (const char* delay : {"1s", "0s", "1s", "0s", "1s", "0s"}) {
    const auto [tally, rc] = stop_under_load({"--shutdown-delay", delay, "--shutdown-idle", "500ms"}, 16, 20);
    EXPECT_EQ(rc, 0) << "--shutdown-delay " << delay;
    EXPECT_EQ(tally.broken, 0) << "--shutdown-delay " << delay << ": requests broken by the drain";
    EXPECT_EQ(tally.refused, 16) << "every client ends refused, none stuck";
    EXPECT_EQ(tally.kept_alive_after_term, 0) << "a reply after SIGTERM without Connection: close";
    sum.answered += tally.answered;
    sum.broken += tally.broken;
    sum.stale += tally.stale;
  }
  std::printf("shutdown under load: %d answered, %d broken, %d stale over 6 shutdowns\n", sum.answered, sum.broken,
              sum.stale);
  EXPECT_GT(sum.answered, 6 * 16 * 20);
  // A client thread not run for 250 ms on a loaded machine: allowed, and rare.
  EXPECT_LE(sum.stale, 6);
}

// A client stalled halfway through its header when the grace ends: the
// process closes it, says so, and exits 1; the others drained cleanly.
TEST(Shutdown, ARequestStillBeingReadWhenTheGraceEndsIsCutLoggedAndExitsOne) {
  const Served s = serve({"--shutdown-grace", "1s", "--header-timeout", "30s"});
  ASSERT_GT(s.pid, 0);
  RawConnection stalled(s.port);
  ASSERT_TRUE(stalled.send("POST /predict HTTP/1.1\r\nHost: t"));
  RawConnection idle(s.port);
  ASSERT_TRUE(idle.send(predict_request(3)));
  ASSERT_TRUE(idle.read_response());
  std::this_thread::sleep_for(100ms);
  const auto term = Clock::now();
  kill(s.pid, SIGTERM);
  EXPECT_EQ(wait_exit(s.pid, 20), 1);
  const auto took = Clock::now() - term;
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 5s);
  EXPECT_TRUE(stalled.wait_closed(1s));
  const std::string log = slurp(s.log);
  EXPECT_NE(log.find("msg=\"drain cut requests at the end of the shutdown grace\""), std::string::npos) << log;
  EXPECT_NE(log.find("reading_header=1"), std::string::npos) << log;
  EXPECT_NE(log.find("msg=\"shutdown grace period over; requests cut\" requests=1"), std::string::npos) << log;
}

}  // namespace
}  // namespace numaserve::testing
