// The service's HTTP transport with a plain application behind it, over
// real loopback sockets: HTTP/1.1 as clients speak it (pipelining, Expect:
// 100-continue, chunked bodies, HEAD, HTTP/1.0), every limit and deadline,
// the turn in which requests that arrived together are answered, replies
// from other threads, and the drain. Deadlines are short and every wait is
// bounded.
#include "http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "raw_http.h"

namespace numaserve::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RawConnection;

// /echo answers "<loop> <method> <path> <body>" at once; /turn answers in the
// loop's next turn, with how many requests that turn answered; /thread from
// another thread; /drop never (its responder is dropped); /hold when the
// test releases it.
class TestApp final : public Handler {
 public:
  void on_loop_start(std::size_t loop) override {
    std::lock_guard lock(mutex_);
    started_.push_back(loop);
  }

  void on_request(std::size_t loop, Request&& request, Responder responder) override {
    if (request.path == "/turn") {
      if (block_next_turn_.exchange(false)) blocked_turn_ = true;
      deferred_[loop].push_back(std::move(responder));
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
    if (request.path == "/hold") {
      std::lock_guard lock(mutex_);
      held_.push_back(std::move(responder));
      held_cv_.notify_all();
      return;
    }
    Reply reply;
    reply.content_type = "text/plain";
    reply.body = std::to_string(loop) + " " + request.method + " " + request.path + " " + request.body;
    reply.headers.emplace_back("X-Test", "yes");
    responder.send(std::move(reply));
  }

  Turn on_turn(std::size_t loop) override {
    auto& waiting = deferred_[loop];
    if (blocked_turn_) {
      // Holds the loop as a long forward would, while more requests arrive.
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
  std::map<std::size_t, std::vector<Responder>> deferred_;  // per loop, its own thread's
  bool blocked_turn_ = false;
};

ServerConfig small(std::size_t loops = 1) {
  ServerConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  c.loops = loops;
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
  // Five more arrive while the loop is held in a turn: the next turn takes all five.
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

TEST(Server, ConnectionsAreHandedToTheLoopsInTurn) {
  Running r(small(2));
  std::vector<RawConnection> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(r.connect());
    clients.back().send(testing::get("/echo"));
    auto response = clients.back().read_response();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->body.substr(0, 1), std::to_string(i % 2)) << i;
  }
  for (const auto& loop : r.server.stats()) EXPECT_EQ(loop.accepted, 3u);
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

namespace numaserve::http {
namespace {

// Every cut of the same bytes: one byte at a time, and every split in two.
void expect_same_in_pieces(const std::string& bytes, const ServerConfig& config, const Framing& whole) {
  std::vector<std::size_t> every_byte;
  for (std::size_t i = 1; i < bytes.size(); ++i) every_byte.push_back(i);
  std::vector<std::vector<std::size_t>> cuts{every_byte};
  for (std::size_t i = 1; i < bytes.size(); ++i) cuts.push_back({i});
  for (const auto& at : cuts) {
    const Framing pieces = frame_requests(bytes, config, at);
    ASSERT_EQ(pieces.requests.size(), whole.requests.size()) << "cut at " << at.front();
    for (std::size_t i = 0; i < whole.requests.size(); ++i) EXPECT_EQ(pieces.requests[i].body, whole.requests[i].body);
    EXPECT_EQ(pieces.refusal, whole.refusal) << "cut at " << at.front() << ", " << at.size() << " cut(s)";
    EXPECT_EQ(pieces.incomplete, whole.incomplete);
  }
}

TEST(Framing, BytesInPiecesFrameAsTheWholeAndStopWhereAConnectionStops) {
  const std::string bytes = testing::post("/a%20b?x=1", "hello") +
                            "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
                            "GET /d HTTP/1.0\r\n\r\n" + testing::get("/never-read");
  auto config = small();
  const Framing whole = frame_requests(bytes, config);
  ASSERT_EQ(whole.requests.size(), 3u);  // HTTP/1.0 without keep-alive: the connection closes after /d
  EXPECT_EQ(whole.requests[0].path, "/a b");
  EXPECT_EQ(whole.requests[0].body, "hello");
  EXPECT_EQ(whole.requests[1].body, "abc");
  EXPECT_EQ(whole.requests[2].method, "GET");
  EXPECT_EQ(whole.refusal, 0);
  expect_same_in_pieces(bytes, config, whole);

  const Framing refused = frame_requests(testing::get("/ok") + "POST /big HTTP/1.1\r\nContent-Length: 100\r\n\r\n", config);
  EXPECT_EQ(refused.requests.size(), 1u);
  EXPECT_EQ(refused.refusal, 413);
  EXPECT_EQ(refused.refusal_field, "body");
  EXPECT_TRUE(frame_requests("GET /half HTTP/1.1\r\nHo", config).incomplete);
}

TEST(Framing, ChunkExtensionsAndTrailersFrameTheSameInPieces) {
  const std::string head = "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  const auto config = small();
  // Extensions (a token, a quoted string with an escape and a CRLF-free
  // quote inside), and a trailer field: the body is the chunks' data.
  const std::string good = head + "3 ; a=b;c=\"x\\\"; y\"\r\nabc\r\n2;z\r\nde\r\n0;end=1\r\nX-Sum: 5\r\n\r\n" +
                           testing::get("/next");
  const Framing whole = frame_requests(good, config);
  ASSERT_EQ(whole.requests.size(), 2u);
  EXPECT_EQ(whole.requests[0].body, "abcde");
  EXPECT_EQ(whole.refusal, 0);
  expect_same_in_pieces(good, config, whole);

  // A quoted extension not closed on its line is malformed however the
  // bytes come; before the fix, in pieces, Beast took the chunk's size off
  // the body limit at every retry and answered 413.
  const std::string open_quote = head + "8;x=\"R\x1b\r\nabcdefgh\r\n\"\r\n0\r\n\r\n";
  const Framing bad = frame_requests(open_quote, config);
  EXPECT_EQ(bad.refusal, 400);
  expect_same_in_pieces(open_quote, config, bad);

  for (const char* line : {"x\r\n", "3;\r\n", "3;a=\r\n", "3 x\r\n", "3;a=\"\x01\"\r\n",
                                  "11111111111111111\r\n"}) {
    const Framing refused = frame_requests(head + line + "abc\r\n0\r\n\r\n", config);
    EXPECT_EQ(refused.refusal, 400) << line;
  }
  // Chunk data longer than its size.
  EXPECT_EQ(frame_requests(head + "2\r\nabc\r\n0\r\n\r\n", config).refusal, 400);
  // A chunk line, and the last chunk's trailers, over the header limit.
  const std::string long_line = head + "3;a=" + std::string(config.max_header_bytes, 'x') + "\r\nabc\r\n0\r\n\r\n";
  const Framing too_long = frame_requests(long_line, config);
  EXPECT_EQ(too_long.refusal, 400);
  expect_same_in_pieces(long_line, config, too_long);
  const std::string big_trailers = head + "0\r\nX: " + std::string(config.max_header_bytes, 'x') + "\r\n\r\n";
  const Framing trailers = frame_requests(big_trailers, config);
  EXPECT_EQ(trailers.refusal, 431);
  EXPECT_EQ(trailers.refusal_field, "headers");
  expect_same_in_pieces(big_trailers, config, trailers);
  // Still waiting for the rest: incomplete, not refused.
  EXPECT_TRUE(frame_requests(head + "3;a=\"op", config).incomplete);
  EXPECT_TRUE(frame_requests(head + "0\r\nX: 1\r\n", config).incomplete);
}

}  // namespace
}  // namespace numaserve::http
