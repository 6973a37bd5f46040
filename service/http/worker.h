#pragma once
// One worker: a pinned thread running its own event loop. It owns the
// connections the acceptor hands it (HTTP/1.1, and HTTP/2 on the gRPC port) and runs each request it reads to
// completion on its core: the application (Handler) gets the whole request
// on the worker's thread, and after every round of network events it gets
// a turn (Handler::on_turn) to run what the round gathered — one forward
// for all the requests that arrived together; a round ends early when the
// application asks for its turn (Handler::turn_due). Every connection has a
// deadline for its phase (idle between requests, header, body, sending the
// reply), checked by a sweep on each worker, not a timer per connection.
// Private to http/: server.cpp starts and stops workers, connection.cpp
// lives on one.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "http/busy.h"
#include "http/config.h"
#include "http/handler.h"

namespace numaserve::http {

class Connection;
class Worker;

// Which listener a connection came from: what it speaks, and whether its
// requests are the admin port's (Request::admin).
enum class PortKind { kMain, kAdmin, kGrpc };

// Counters have one writer, their worker's thread: a plain load and store
// instead of a locked read-modify-write on the hot path.
inline void bump(std::atomic<std::uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

struct alignas(64) WorkerCounters {
  std::atomic<std::uint64_t> connections{0}, accepted{0}, requests{0}, idle_closed{0}, timed_out{0}, rejected{0}, cut{0},
      retired{0};
};

// What the workers share.
struct ServerState {
  ServerConfig config;
  Handler* handler = nullptr;
  std::size_t max_connections = 0;
  std::atomic<std::size_t> open{0};  // over all workers
  std::atomic<std::uint64_t> refused{0};
  // Every reply carries Connection: close (Server::announce_shutdown).
  std::atomic<bool> closing{false};
  // When the drain closes what is left; written before the workers are
  // told to drain, read only after.
  std::chrono::steady_clock::time_point cut_at = std::chrono::steady_clock::time_point::max();
  std::vector<std::unique_ptr<Worker>> workers;
};

// After a reply with Connection: close the worker keeps reading (and
// dropping) what the client still sends, so that closing does not reset the
// connection before the client has read the reply — a client uploading a
// body over the limit reads its 413 only after it finished sending.
constexpr double kLingerSeconds = 5;

class Worker {
 public:
  Worker(ServerState& shared, std::size_t i) : server(shared), index(i) {}

  void run();  // the thread's body, until the drain has closed every connection
  void adopt(boost::asio::ip::tcp::socket socket, bool counted, PortKind port);
  void drain();
  void wake() {
    boost::asio::post(context, [] {});
  }
  bool runs_here() const;  // called on this worker's own thread

  void link(Connection* c);
  void unlink(Connection* c);

  ServerState& server;
  const std::size_t index;
  WorkerCounters counters;
  BusyShare busy;  // its thread's CPU over the last seconds, sampled by its sweep
  std::size_t open = 0;  // counted connections, this worker's thread only
  bool draining = false;
  std::array<char, 16u << 10> scratch{};  // where lingering connections drop what they read
  std::thread thread;
  Connection* first = nullptr;
  // Destroyed before the members above: a handler it still holds may own
  // the last reference to a connection, whose destructor unlinks it here.
  boost::asio::io_context context{1};
  boost::asio::steady_timer sweep_timer{context};

 private:
  void arm_sweep();
  void sweep(std::chrono::steady_clock::duration period);
  void cut();
  std::chrono::steady_clock::duration tick() const;
  // Calls `f` on each connection, holding it meanwhile: `f` may close it,
  // and the last reference may go with that.
  template <typename F>
  void each_connection(F f);  // worker.cpp, its only user
};

}  // namespace numaserve::http
