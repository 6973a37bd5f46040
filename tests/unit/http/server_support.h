#pragma once
// What the transport's tests serve (server_test.cpp: HTTP as clients speak
// it, limits, deadlines, turns; server_drain_test.cpp: stop and drain): a
// plain application behind a real Server on loopback, with small limits.

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/server.h"
#include "raw_http.h"

namespace numaserve::http::server_testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RawConnection;

// /echo answers "<worker> <method> <path> <body>" at once; /turn answers in
// the worker's next turn, with how many requests that turn answered (/urgent
// too, and it asks for that turn before the loop reads on); /thread
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
    if (request.path == "/turn" || request.path == "/urgent") {
      if (block_next_turn_.exchange(false)) blocked_turn_ = true;
      urgent_.at(worker) = urgent_.at(worker) || request.path == "/urgent";
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
    urgent_.at(worker) = false;
    return {};
  }

  bool turn_due(std::size_t worker) const override { return urgent_.at(worker); }

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
  std::array<bool, 4> urgent_{};
  bool blocked_turn_ = false;
};

inline ServerConfig small(std::size_t workers = 1) {
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

// GET /echo on `c` is answered 200 with Connection: close, and the server
// then closes the connection.
inline void expect_closing_reply(RawConnection& c) {
  ASSERT_TRUE(c.send(testing::get("/echo")));
  auto reply = c.read_response();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->header("connection"), "close");
  EXPECT_TRUE(c.wait_closed(2s));
}

}  // namespace numaserve::http::server_testing
