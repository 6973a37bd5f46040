#pragma once
// What the application (service/api/) sees of the transport: the request it
// is handed, the reply it owes, and its turn on the worker's thread. No Asio
// or Beast type appears here, so an application and its tests need neither.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "http/message.h"
#include "numaserve/common/turn.h"

namespace numaserve::http {

// Where a Responder's reply goes: the connection in the server, a recorder
// in tests.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // Any thread; called at most once per Responder.
  virtual void send(Reply reply) = 0;
  // The reply owed was dropped unsent; any thread.
  virtual void dropped() = 0;
};

// The reply owed to one request. Send it exactly once, from any thread: on
// the worker that owns the connection it is written at once, from another
// thread it is posted to that worker. Dropped unsent, it answers 500, so a
// client never waits for a reply nobody will write.
class Responder {
 public:
  explicit Responder(std::shared_ptr<ReplySink> sink) : sink_(std::move(sink)) {}
  Responder(Responder&&) noexcept = default;
  Responder& operator=(Responder&&) = delete;  // would drop the reply it holds
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder() {
    if (sink_) sink_->dropped();
  }

  // A second send, or a send after a move, does nothing.
  void send(Reply reply) {
    const auto sink = std::move(sink_);  // kept alive through the call
    if (sink) sink->send(std::move(reply));
  }

 private:
  std::shared_ptr<ReplySink> sink_;
};

// The application, called only on the workers' own threads.
class Handler {
 public:
  virtual ~Handler() = default;
  // First on each worker's thread, before it serves: pin the thread here.
  virtual void on_worker_start(std::size_t worker) = 0;
  virtual void on_request(std::size_t worker, Request&& request, Responder responder) = 0;
  virtual Turn on_turn(std::size_t worker) = 0;
  // Asked before each ready network event a worker handles: true stops its
  // intake and gives the application its turn now, before the events still
  // ready (a request that must not wait behind the reading of a flood).
  virtual bool turn_due(std::size_t worker) const = 0;
  // The reply to a request the transport refuses by itself (400 malformed,
  // 408, 413, 431, 503 over the connection limit, 500 dropped): the
  // application's error body, so every error a client sees has one shape.
  // The transport sends it with `status` and adds its own headers
  // (Retry-After on its 503).
  virtual Reply refusal(int status, const std::string& message, const std::string& field) const = 0;
};

}  // namespace numaserve::http
