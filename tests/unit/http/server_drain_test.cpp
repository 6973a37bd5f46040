// The transport's stop and drain over real loopback sockets: what was read
// is answered, idle connections close, every reply after the shutdown is
// announced closes its connection, and what the grace cuts is counted.
// Deadlines are short and every wait is bounded.
#include "http/server.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <future>

#include "server_support.h"

namespace numaserve::http::server_testing {
namespace {

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

// stop() while clients keep connecting: an accept that completed as the
// port closed is handed over like any other, and accepting ends there (it
// once went on, on the closed port, forever, and stop() never returned).
TEST(Server, StopReturnsWhileClientsKeepConnecting) {
  for (int round = 0; round < 30; ++round) {
    auto r = std::make_unique<Running>(small());
    const int port = r->server.port();
    std::atomic<bool> done{false};
    std::thread clients([&] {  // connect and go, without waiting for a handshake the closing port drops
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<std::uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      while (!done.load()) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
        ::close(fd);
      }
    });
    std::this_thread::sleep_for(2ms);
    std::promise<void> returned;
    std::thread stopper([&] {
      r->server.stop();
      returned.set_value();
    });
    if (returned.get_future().wait_for(5s) != std::future_status::ready) {
      ADD_FAILURE() << "stop() did not return within 5 s in round " << round;
      std::_Exit(1);  // the stuck thread cannot be joined: end the run rather than hang it
    }
    done = true;
    stopper.join();
    clients.join();
  }
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
  expect_closing_reply(before);
  auto after = r.connect();
  ASSERT_TRUE(after.connected()) << "the port must accept until stop()";
  expect_closing_reply(after);
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

}  // namespace
}  // namespace numaserve::http::server_testing
