// The service's HTTP transport with a plain application behind it, over
// real loopback sockets: HTTP/1.1 as clients speak it (pipelining, Expect:
// 100-continue, chunked bodies, HEAD, HTTP/1.0), every limit and deadline,
// the turn in which requests that arrived together are answered, replies
// from other threads (the drain: server_drain_test.cpp). Deadlines are
// short and every wait is bounded.
#include "http/server.h"

#include <gtest/gtest.h>

#include "server_support.h"

namespace numaserve::http::server_testing {
namespace {

// `count` clients, each sending `path` on a connection of its own.
std::vector<RawConnection> each_sends(Running& r, int count, const std::string& path) {
  std::vector<RawConnection> clients;
  for (int i = 0; i < count; ++i) {
    clients.push_back(r.connect());
    clients.back().send(testing::get(path));
  }
  return clients;
}

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
  auto clients = each_sends(r, 5, "/turn");
  EXPECT_EQ(alone.read_response()->body, "batch=1");
  for (auto& c : clients) EXPECT_EQ(c.read_response()->body, "batch=5");
}

TEST(Server, ATurnDueStopsTheIntakeOfTheRequestsStillReady) {
  Running r(small());
  auto first = r.connect();
  r.app.block_next_turn_ = true;
  first.send(testing::get("/turn"));
  std::this_thread::sleep_for(30ms);
  // While the worker is held, an urgent request is ready, then four more:
  // the loop gives the turn once it has read the urgent one, before the rest.
  auto urgent = each_sends(r, 1, "/urgent");
  std::this_thread::sleep_for(10ms);
  auto clients = each_sends(r, 4, "/turn");
  EXPECT_EQ(first.read_response()->body, "batch=1");
  EXPECT_EQ(urgent[0].read_response()->body, "batch=1");
  for (auto& c : clients) EXPECT_EQ(c.read_response()->body, "batch=4");
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

// --max-connection-requests: the Nth reply says Connection: close and the
// server closes after writing it, so the client reconnects (and kube-proxy
// may pick another replica).
TEST(Server, AConnectionRetiresAfterItsLastRequestNeverMidRequest) {
  ServerConfig config = small();
  config.max_connection_requests = 3;
  Running r(config);
  auto c = r.connect();
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(c.send(testing::post("/echo", std::to_string(i))));
    auto response = c.read_response();
    ASSERT_TRUE(response) << i;
    EXPECT_EQ(response->body, "0 POST /echo " + std::to_string(i));
    EXPECT_EQ(response->header("connection"), i < 3 ? "" : "close") << i;
  }
  EXPECT_TRUE(c.wait_closed(2s));
  EXPECT_EQ(r.server.stats()[0].retired, 1u);
  // A new connection counts afresh.
  auto again = r.connect();
  again.send(testing::get("/echo"));
  EXPECT_EQ(again.read_response()->header("connection"), "");
}

// What the client pipelined behind the last request is answered before the
// close, not dropped.
TEST(Server, RequestsPipelinedPastTheLimitAreAnsweredThenTheConnectionCloses) {
  ServerConfig config = small();
  config.max_connection_requests = 3;
  Running r(config);
  auto c = r.connect();
  std::string burst;
  for (int i = 1; i <= 5; ++i) burst += testing::post("/echo", std::to_string(i));
  ASSERT_TRUE(c.send(burst));
  for (int i = 1; i <= 5; ++i) {
    auto response = c.read_response();
    ASSERT_TRUE(response) << i;
    EXPECT_EQ(response->status, 200) << i;
    EXPECT_EQ(response->body, "0 POST /echo " + std::to_string(i));
    EXPECT_EQ(response->header("connection"), i < 5 ? "" : "close") << i;
  }
  EXPECT_TRUE(c.wait_closed(2s));
}

// --max-connection-age: the first reply after the connection's age (within
// ±10% of the setting) closes it.
TEST(Server, AConnectionRetiresOnceOld) {
  ServerConfig config = small();
  config.max_connection_age_seconds = 0.2;
  Running r(config);
  auto c = r.connect();
  ASSERT_TRUE(c.send(testing::get("/echo")));
  EXPECT_EQ(c.read_response()->header("connection"), "");  // at most ~0 s old: well under 0.18 s
  std::this_thread::sleep_for(300ms);                       // past 0.22 s, the longest age drawn
  expect_closing_reply(c);
  EXPECT_EQ(r.server.stats()[0].retired, 1u);
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
}  // namespace numaserve::http::server_testing
