// The service's HTTP transport with a plain application behind it, over
// real loopback sockets: HTTP/1.1 as clients speak it (pipelining, Expect:
// 100-continue, chunked bodies, HEAD, HTTP/1.0), every limit and deadline,
// the turn in which requests that arrived together are answered, replies
// from other threads, and the drain. Deadlines are short and every wait is
// bounded.
#include "http/server.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "raw_http.h"

namespace numaserve::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RawConnection;

// /echo answers "<worker> <method> <path> <body>" at once; /turn answers in
// the worker's next turn, with how many requests that turn answered; /thread
// from another thread; /drop never (its responder is dropped), /drop-thread
// neither (dropped on another thread); /hold when the test releases it. Its
// refusals have the service's error shape, {"error": ..., "field": ...}.
class TestApp final : public Handler {
 public:
  void on_worker_start(std::size_t worker) override {
    std::lock_guard lock(mutex_);
    started_.push_back(worker);
  }

  void on_request(std::size_t worker, Request&& request, Responder responder) override {
    if (request.path == "/turn") {
      if (block_next_turn_.exchange(false)) blocked_turn_ = true;
      deferred_.at(worker).push_back(std::move(responder));
      return;
    }
    if (request.path == "/thread") {
      std::lock_guard lock(mutex_);
      threads_.emplace_back([r = std::move(responder)]() mutable {
        Reply reply;
        reply.body = "from another thread";
        r.send(std::move(reply));
      });
      return;
    }
    if (request.path == "/drop") return;
    if (request.path == "/drop-thread") {
      std::lock_guard lock(mutex_);
      threads_.emplace_back([r = std::move(responder)]() mutable { auto gone = std::move(r); });
      return;
    }
    if (request.path == "/hold") {
      std::lock_guard lock(mutex_);
      held_.push_back(std::move(responder));
      held_cv_.notify_all();
      return;
    }
    Reply reply;
    reply.content_type = "text/plain";
    reply.body = std::to_string(worker) + " " + request.method + " " + request.path + " " + request.body;
    reply.headers.emplace_back("X-Test", "yes");
    responder.send(std::move(reply));
  }

  Turn on_turn(std::size_t worker) override {
    auto& waiting = deferred_.at(worker);
    if (blocked_turn_) {
      // Holds the worker as a long forward would, while more requests arrive.
      blocked_turn_ = false;
      std::this_thread::sleep_for(100ms);
    }
    const std::size_t batch = waiting.size();
    for (auto& r : waiting) {
      Reply reply;
      reply.body = "batch=" + std::to_string(batch);
      r.send(std::move(reply));
    }
    waiting.clear();
    return {};
  }

  Reply refusal(int status, const std::string& message, const std::string& field) const override {
    nlohmann::json body = {{"error", message}};
    if (!field.empty()) body["field"] = field;
    Reply reply;
    reply.status = status;
    reply.body = body.dump();
    return reply;
  }

  void release_held(std::size_t count) {
    std::unique_lock lock(mutex_);
    held_cv_.wait_for(lock, 5s, [&] { return held_.size() >= count; });
    for (auto& r : held_) {
      Reply reply;
      reply.body = "held";
      r.send(std::move(reply));
    }
    held_.clear();
  }
  void wait_held(std::size_t count) {
    std::unique_lock lock(mutex_);
    held_cv_.wait_for(lock, 5s, [&] { return held_.size() >= count; });
  }

  ~TestApp() override {
    for (auto& t : threads_) t.join();
  }

  std::atomic<bool> block_next_turn_{false};

 private:
  std::mutex mutex_;
  std::vector<std::size_t> started_;
  std::vector<std::thread> threads_;
  std::condition_variable held_cv_;
  std::vector<Responder> held_;
  // Per worker, each touched only on its own thread: a fixed slot apiece, as
  // inserting into a shared map from two workers at once would race.
  std::array<std::vector<Responder>, 4> deferred_;
  bool blocked_turn_ = false;
};

ServerConfig small(std::size_t workers = 1) {
  ServerConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  c.workers = workers;
  c.max_header_bytes = 1024;
  c.max_body_bytes = 64;
  c.header_timeout_seconds = 0.3;
  c.body_timeout_seconds = 0.3;
  c.idle_timeout_seconds = 0.5;
  return c;
}

// A server and its application; the server stops first.
struct Running {
  explicit Running(const ServerConfig& config) : server(config) { EXPECT_TRUE(server.start(app).has_value()); }
  ~Running() { server.stop(); }
  RawConnection connect() { return RawConnection(server.port()); }
  TestApp app;
  Server server;
};

TEST(Server, PipelinedRequestsAreAnsweredInOrder) {
  Running r(small());
  auto c = r.connect();
  std::string burst;
  for (int i = 0; i < 100; ++i) burst += testing::post("/echo", std::to_string(i));
  ASSERT_TRUE(c.send(burst));
  for (int i = 0; i < 100; ++i) {
    auto response = c.read_response();
    ASSERT_TRUE(response) << i;
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "0 POST /echo " + std::to_string(i));
    EXPECT_EQ(response->header("x-test"), "yes");
  }
  EXPECT_EQ(r.server.stats()[0].requests, 100u);
}

TEST(Server, RequestsThatArriveTogetherAreAnsweredInOneTurn) {
  Running r(small());
  // Alone, a request is its own batch: nothing waits for company.
  auto alone = r.connect();
  alone.send(testing::get("/turn"));
  EXPECT_EQ(alone.read_response()->body, "batch=1");
  // Five more arrive while the worker is held in a turn: the next turn takes all five.
  r.app.block_next_turn_ = true;
  alone.send(testing::get("/turn"));
  std::this_thread::sleep_for(30ms);
  std::vector<RawConnection> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(r.connect());
    clients.back().send(testing::get("/turn"));
  }
  EXPECT_EQ(alone.read_response()->body, "batch=1");
  for (auto& c : clients) EXPECT_EQ(c.read_response()->body, "batch=5");
}

TEST(Server, ExpectContinueGetsAnInterimResponseThenTheReply) {
  Running r(small());
  auto c = r.connect();
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  auto interim = c.read_response();
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  c.send("hello");
  auto response = c.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "0 POST /echo hello");
}

TEST(Server, ChunkedBodiesAreJoinedAndLimitedByTheirDecodedSize) {
  Running r(small());
  auto c = r.connect();
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  EXPECT_EQ(c.read_response()->body, "0 POST /echo hello world");
  // 3 chunks of 30 bytes: 90 decoded bytes, over the 64-byte limit.
  std::string chunked = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) chunked += "1e\r\n" + std::string(30, 'x') + "\r\n";
  c.send(chunked + "0\r\n\r\n");
  auto refused = c.read_response();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 413);
  EXPECT_NE(refused->body.find("\"field\":\"body\""), std::string::npos) << refused->body;
  EXPECT_TRUE(c.wait_closed(2s));
}

TEST(Server, LimitsAnswerWithTheirStatusAndAJsonBodyThenClose) {
  Running r(small());
  struct Case {
    std::string request;
    int status;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"GET /echo HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n", 431, "headers"},
      // Refused on its header alone: the body is never sent.
      {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n", 413, "body"},
      {"NOT A REQUEST\r\n\r\n", 400, ""},
  };
  for (const auto& k : cases) {
    auto c = r.connect();
    c.send(k.request);
    auto response = c.read_response();
    ASSERT_TRUE(response) << k.status;
    EXPECT_EQ(response->status, k.status);
    EXPECT_EQ(response->header("connection"), "close");
    EXPECT_NE(response->body.find("\"error\""), std::string::npos) << response->body;
    if (!k.field.empty()) {
      EXPECT_NE(response->body.find("\"field\":\"" + k.field + "\""), std::string::npos);
    }
    EXPECT_TRUE(c.wait_closed(2s));
  }
  EXPECT_EQ(r.server.stats()[0].rejected, 3u);
}

TEST(Server, AHeaderNotCompleteByItsDeadlineGets408AndClose) {
  Running r(small());
  auto c = r.connect();
  const auto start = Clock::now();
  c.send("GET /echo HTTP/1.1\r\nHo");
  auto response = c.read_response(3s);
  const auto waited = Clock::now() - start;
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 408);
  EXPECT_NE(response->body.find("\"field\":\"headers\""), std::string::npos);
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 1s);  // the deadline plus at most a sweep tick, and slack
  EXPECT_TRUE(c.wait_closed(2s));
  EXPECT_EQ(r.server.stats()[0].timed_out, 1u);
}

TEST(Server, ABodyThatStopsHalfWayIsClosedAtItsDeadlineAndNothingLeaks) {
  Running r(small());
  {
    auto c = r.connect();
    c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n\r\n0123456789");
    auto response = c.read_response(3s);
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 408);
    EXPECT_NE(response->body.find("\"field\":\"body\""), std::string::npos);
    EXPECT_TRUE(c.wait_closed(2s));
  }
  for (int i = 0; i < 100 && r.server.stats()[0].connections != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(r.server.stats()[0].connections, 0u);
}

TEST(Server, IdleConnectionsAreClosedAtTheIdleTimeout) {
  Running r(small());
  auto used = r.connect();
  used.send(testing::get("/echo"));
  ASSERT_TRUE(used.read_response());
  auto silent = r.connect();  // never sends a byte
  const auto start = Clock::now();
  EXPECT_TRUE(used.wait_closed(3s));
  EXPECT_TRUE(silent.wait_closed(3s));
  EXPECT_GE(Clock::now() - start, 450ms);
  EXPECT_EQ(r.server.stats()[0].idle_closed, 2u);
}

TEST(Server, AConnectionBeyondTheLimitGets503AndIsClosed) {
  auto config = small();
  config.max_connections = 2;
  config.idle_timeout_seconds = 10;
  Running r(config);
  auto a = r.connect();
  auto b = r.connect();
  for (auto* c : {&a, &b}) {
    c->send(testing::get("/echo"));
    ASSERT_EQ(c->read_response()->status, 200);
  }
  auto third = r.connect();
  third.send(testing::get("/echo"));
  auto refused = third.read_response();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->header("connection"), "close");
  EXPECT_EQ(refused->header("retry-after"), "1");
  EXPECT_EQ(refused->body, R"({"error":"too many connections: the limit is 2"})");
  EXPECT_TRUE(third.wait_closed(2s));
  EXPECT_EQ(r.server.refused_connections(), 1u);
  // A slot freed is a slot to take.
  a.close();
  for (int i = 0; i < 100 && r.server.stats()[0].connections != 1; ++i) std::this_thread::sleep_for(10ms);
  auto fourth = r.connect();
  fourth.send(testing::get("/echo"));
  EXPECT_EQ(fourth.read_response()->status, 200);
}

TEST(Server, RepliesFromOtherThreadsAndDroppedRequests) {
  Running r(small());
  auto c = r.connect();
  c.send(testing::get("/thread"));
  EXPECT_EQ(c.read_response()->body, "from another thread");
  c.send(testing::get("/drop"));
  auto dropped = c.read_response();
  ASSERT_TRUE(dropped);
  EXPECT_EQ(dropped->status, 500);
  EXPECT_EQ(dropped->body, R"({"error":"internal error: the request was dropped without a reply"})");
  c.send(testing::get("/drop-thread"));
  auto dropped_elsewhere = c.read_response();
  ASSERT_TRUE(dropped_elsewhere);
  EXPECT_EQ(dropped_elsewhere->status, 500);
  EXPECT_EQ(dropped_elsewhere->body, dropped->body);
  c.send(testing::get("/echo"));  // the connection goes on
  EXPECT_EQ(c.read_response()->status, 200);
}

TEST(Server, HeadAndHttp10) {
  Running r(small());
  auto c = r.connect();
  c.send("HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\n");
  auto head = c.read_response(5s, true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->header("content-length"), std::to_string(std::string("0 HEAD /echo ").size()));
  EXPECT_TRUE(head->body.empty());
  c.send("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  auto kept = c.read_response();
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->header("connection"), "keep-alive");
  c.send("GET /echo HTTP/1.0\r\n\r\n");
  auto last = c.read_response();
  ASSERT_TRUE(last);
  EXPECT_EQ(last->header("connection"), "close");
  EXPECT_TRUE(c.wait_closed(2s));
}

TEST(Server, ConnectionsAreHandedToTheWorkersInTurn) {
  Running r(small(2));
  std::vector<RawConnection> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(r.connect());
    clients.back().send(testing::get("/echo"));
    auto response = clients.back().read_response();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->body.substr(0, 1), std::to_string(i % 2)) << i;
  }
  for (const auto& worker : r.server.stats()) EXPECT_EQ(worker.accepted, 3u);
}

TEST(Server, StopAnswersWhatWasReadClosesIdleConnectionsAndReturns) {
  Running r(small());
  auto idle = r.connect();
  idle.send(testing::get("/echo"));
  ASSERT_TRUE(idle.read_response());
  auto busy = r.connect();
  busy.send(testing::get("/hold"));
  r.app.wait_held(1);
  std::thread stopper([&] { r.server.stop(); });
  EXPECT_TRUE(idle.wait_closed(2s));
  std::this_thread::sleep_for(50ms);
  r.app.release_held(1);
  auto held = busy.read_response();
  ASSERT_TRUE(held);
  EXPECT_EQ(held->body, "held");
  EXPECT_EQ(held->header("connection"), "close");
  stopper.join();
  RawConnection late(r.server.port());
  EXPECT_FALSE(late.connected() && late.send(testing::get("/echo")) && late.read_response(500ms));
}

// SIGTERM: the port still accepts and serves, but every reply tells the
// client to reconnect, so a keep-alive pool moves off this replica one
// reply at a time.
TEST(Server, AfterTheShutdownIsAnnouncedEveryReplyClosesItsConnection) {
  Running r(small());
  auto before = r.connect();
  before.send(testing::get("/echo"));
  auto kept = before.read_response();
  ASSERT_TRUE(kept);
  EXPECT_NE(kept->header("connection"), "close");
  r.server.announce_shutdown();
  auto closing_reply = [](RawConnection& c) {
    ASSERT_TRUE(c.send(testing::get("/echo")));
    auto reply = c.read_response();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->header("connection"), "close");
    EXPECT_TRUE(c.wait_closed(2s));
  };
  closing_reply(before);
  auto after = r.connect();
  ASSERT_TRUE(after.connected()) << "the port must accept until stop()";
  closing_reply(after);
}

// The drain does not close a connection between a reply and the request a
// closed-loop client sends right after it: an idle connection is closed
// only once it has been idle for shutdown_idle_seconds, and a request that
// comes before is answered, with Connection: close.
TEST(Server, TheDrainAnswersARequestThatArrivesBeforeTheConnectionWasIdleLongEnough) {
  auto config = small();
  config.idle_timeout_seconds = 10;
  config.shutdown_idle_seconds = 0.6;
  Running r(config);
  auto busy = r.connect();
  const auto silent_connected = Clock::now();  // the server's idle clock starts after this
  auto silent = r.connect();
  busy.send(testing::get("/echo"));
  ASSERT_TRUE(busy.read_response());
  const auto start = Clock::now();
  std::thread stopper([&] { r.server.stop(); });
  std::this_thread::sleep_for(150ms);  // the port is closed by now
  EXPECT_FALSE(RawConnection(r.server.port()).connected()) << "the port still accepts during the drain";
  ASSERT_TRUE(busy.send(testing::get("/echo")));
  auto late = busy.read_response();
  ASSERT_TRUE(late) << "a request sent 150 ms into the drain, on a connection idle as long, was not answered";
  EXPECT_EQ(late->status, 200);
  EXPECT_EQ(late->header("connection"), "close");
  EXPECT_TRUE(busy.wait_closed(2s));
  EXPECT_TRUE(silent.wait_closed(3s));
  EXPECT_GE(Clock::now() - silent_connected, 600ms) << "an idle connection was closed before shutdown_idle";
  EXPECT_LT(Clock::now() - start, 2s);
  stopper.join();
  EXPECT_EQ(r.server.stats()[0].cut, 0u);
}

// Pipelined requests during the drain: the first is answered whole, with
// Connection: close, and the connection ends before any byte of the others.
TEST(Server, PipelinedRequestsInTheDrainGetOneWholeReplyThenTheClose) {
  Running r(small());
  auto c = r.connect();
  c.send(testing::get("/echo"));
  ASSERT_TRUE(c.read_response());
  r.server.announce_shutdown();
  std::string burst;
  for (int i = 0; i < 3; ++i) burst += testing::post("/echo", std::to_string(i));
  ASSERT_TRUE(c.send(burst));
  auto first = c.read_response();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body, "0 POST /echo 0");
  EXPECT_EQ(first->header("connection"), "close");
  EXPECT_FALSE(c.read_response(1s)) << "a pipelined request behind the close was answered";
  EXPECT_TRUE(c.wait_closed(2s));
  EXPECT_TRUE(c.unread().empty()) << "bytes of a second reply: " << c.unread();
}

// The grace ends with a request being read and another being handled: both
// connections are closed, counted as cut, and stop() returns.
TEST(Server, WhatTheGraceCutsIsClosedAndCounted) {
  auto config = small();
  config.header_timeout_seconds = 10;
  config.idle_timeout_seconds = 10;
  Running r(config);
  auto slow = r.connect();
  ASSERT_TRUE(slow.send("POST /echo HTTP/1.1\r\nHost: te"));
  auto held = r.connect();
  held.send(testing::get("/hold"));
  r.app.wait_held(1);
  std::this_thread::sleep_for(50ms);  // the slow header has been read in part
  const auto start = Clock::now();
  r.server.stop(start + 300ms);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2s);
  EXPECT_TRUE(slow.wait_closed(1s));
  EXPECT_TRUE(held.wait_closed(1s));
  EXPECT_FALSE(held.read_response(100ms));
  EXPECT_EQ(r.server.stats()[0].cut, 2u);
  r.app.release_held(1);  // too late: the connection is gone
}

TEST(Server, APortInUseIsAClearError) {
  Running first(small());
  auto config = small();
  config.port = first.server.port();
  Server second(config);
  TestApp app;
  const auto started = second.start(app);
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.error().message.find("cannot listen on 127.0.0.1:" + std::to_string(config.port)), std::string::npos)
      << started.error().message;
}

}  // namespace
}  // namespace numaserve::http
