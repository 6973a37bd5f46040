#pragma once
// The service's HTTP transport — HTTP/1.1, and gRPC over HTTP/2 on its own
// port (http2_connection.h) — one event loop per inference worker, run
// by that worker's own pinned thread (worker.h), which reads each request
// and runs it to completion on its core. No thread per connection, no
// hand-off between an I/O thread and a compute thread. http/ is the
// service's only folder that knows Asio besides the Redis client, which
// waits on a worker's loop lent by context(); framing.cpp is its only file
// that knows Boost.Beast. The application sees handler.h only.
//
// One acceptor thread hands new connections to the workers round-robin, so
// no worker is more than one connection from its share. SO_REUSEPORT's hash
// (a listener per worker) was measured against it (bench/reuseport_balance.py):
// 4 connections on 4 workers left a worker without any in 92% of trials, 16
// put 1.5x its share on the busiest worker (median), 256 still 1.12x. Every
// connection has a deadline for its phase — idle between requests, header,
// body, sending the reply — checked by a sweep on each worker, not a timer
// per connection; an idle connection holds no buffer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "http/config.h"
#include "http/handler.h"
#include "numaserve/common/result.h"

namespace boost::asio {
class io_context;
}

namespace numaserve::http {

// Counters of one worker, for /metrics.
struct WorkerStats {
  std::uint64_t connections = 0;  // open now
  std::uint64_t accepted = 0;
  std::uint64_t requests = 0;      // read whole and handed to the application
  std::uint64_t idle_closed = 0;   // closed after the idle timeout
  std::uint64_t timed_out = 0;     // 408 at the header or body deadline, or a reply the client did not take
  std::uint64_t rejected = 0;      // 400 malformed, 413, 431: refused before the application saw them
  std::uint64_t cut = 0;           // mid-request when the drain's time ran out
  std::uint64_t retired = 0;       // closed after a reply at max_connection_requests or max_connection_age
  double busy_share = 0;           // its thread's CPU time over wall time, the last seconds (busy.h)
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens, then starts the worker threads (each calls
  // handler.on_worker_start first) and the acceptor.
  Status start(Handler& handler);
  int port() const;
  int admin_port() const;  // -1 without an admin listener
  int grpc_port() const;   // -1 without a gRPC listener
  std::size_t max_connections() const;  // the limit in force, after start()

  // Wakes `worker` for a turn; any thread.
  void wake(std::size_t worker);
  // The event loop of `worker`, after start(): a client of another service
  // (the Redis feature store) waits on it from that worker's thread, so a
  // worker waiting for features keeps serving its other connections.
  boost::asio::io_context& context(std::size_t worker);

  // SIGTERM: from now on every reply carries Connection: close, so each
  // client learns on its next reply to reconnect (elsewhere, once the
  // endpoints have dropped this replica), while the port still accepts.
  void announce_shutdown();
  // The drain: the port stops accepting (connections already in its
  // backlog are taken, not reset), every request read or arriving is
  // answered with Connection: close, and a connection without one is closed
  // once it has been idle for shutdown_idle_seconds. At `cut_at` whatever
  // is left is closed, logged and counted (WorkerStats::cut). Returns when
  // every connection has closed and the workers have ended. Idempotent.
  using Clock = std::chrono::steady_clock;
  void stop(Clock::time_point cut_at = Clock::time_point::max());

  std::vector<WorkerStats> stats() const;
  std::uint64_t refused_connections() const;  // beyond max_connections

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace numaserve::http
