#pragma once
// The service's HTTP/1.1 transport: one event loop per inference worker, run
// by that worker's own pinned thread. A loop owns the connections handed to
// it and runs each request it reads to completion on its core: the
// application (Handler) gets the whole request on the loop's thread, and
// after every round of network events it gets a turn (Handler::on_turn) to
// run what the round gathered — one forward for all the requests that
// arrived together. No thread per connection, no hand-off between an I/O
// thread and a compute thread. server.cpp is the service's only file that
// knows Boost.Beast, and the only one that knows Asio besides the Redis
// client (redis/client.cpp), which waits on a loop lent by context().
//
// One acceptor thread hands new connections to the loops round-robin, so
// no loop is more than one connection from its share. SO_REUSEPORT's hash
// (a listener per loop) was measured against it (bench/reuseport_balance.py):
// 4 connections on 4 loops left a loop without any in 92% of trials, 16 put
// 1.5x its share on the busiest loop (median), 256 still 1.12x. Every
// connection has a deadline for its phase — idle between requests, header,
// body, sending the reply — checked by a sweep on each loop, not a timer per
// connection; an idle connection holds no buffer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/message.h"
#include "numaserve/common/result.h"

namespace boost::asio {
class io_context;
}

namespace numaserve::http {

struct ServerConfig {
  std::string host = "0.0.0.0";
  int port = 8080;  // 0: any free port
  // A second listener for operators (metrics, placement, probes), on the same
  // loops; its requests say so (Request::admin). -1: none; 0: any free port.
  int admin_port = -1;
  std::size_t loops = 1;
  // Open connections; beyond it a new one gets 503 and is closed. 0: the
  // file-descriptor limit (raised to its hard limit at start) less a reserve.
  std::size_t max_connections = 0;
  double header_timeout_seconds = 10;  // first byte of a request -> end of its header, else 408
  double body_timeout_seconds = 30;    // end of header -> end of body, and the longest send of a reply
  double idle_timeout_seconds = 60;    // a keep-alive connection with no request is closed after this
  std::size_t max_header_bytes = 16u << 10;  // 431 beyond
  std::size_t max_body_bytes = 8u << 20;     // 413 beyond (chunked bodies count their decoded bytes)
  // Several processes may share the port (the per-NUMA-node supervisor);
  // off by default so a port in use is an error, not a silent split.
  bool reuse_port = false;
};

class Connection;  // server.cpp

// The reply owed to one request. Send it exactly once, from any thread: on
// the loop that owns the connection it is written at once, from another
// thread it is posted to that loop. Dropped unsent, it answers 500, so a
// client never waits for a reply nobody will write.
class Responder {
 public:
  Responder(Responder&&) noexcept = default;
  Responder& operator=(Responder&&) = delete;  // would drop the reply it holds
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder();

  void send(Reply reply);

 private:
  friend class Connection;
  explicit Responder(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}
  std::shared_ptr<Connection> connection_;
};

// What the application asks of the loop after its turn.
struct Turn {
  bool more_work = false;  // run again as soon as the ready network events are handled
  std::optional<std::chrono::steady_clock::time_point> wake_at;  // else sleep at most until then
  std::vector<std::size_t> wake_loops;  // loops to give a turn now (idle ones that may take work)
};

// The application, called only on the loops' own threads.
class Handler {
 public:
  virtual ~Handler() = default;
  // First on each loop's thread, before it serves: pin the thread here.
  virtual void on_loop_start(std::size_t loop) = 0;
  virtual void on_request(std::size_t loop, Request&& request, Responder responder) = 0;
  virtual Turn on_turn(std::size_t loop) = 0;
};

// Counters of one loop, for /metrics.
struct LoopStats {
  std::uint64_t connections = 0;  // open now
  std::uint64_t accepted = 0;
  std::uint64_t requests = 0;      // read whole and handed to the application
  std::uint64_t idle_closed = 0;   // closed after the idle timeout
  std::uint64_t timed_out = 0;     // 408 at the header or body deadline, or a reply the client did not take
  std::uint64_t rejected = 0;      // 400 malformed, 413, 431: refused before the application saw them
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens, then starts the loop threads (each calls
  // handler.on_loop_start first) and the acceptor.
  Status start(Handler& handler);
  int port() const;
  int admin_port() const;  // -1 without an admin listener
  std::size_t max_connections() const;  // the limit in force, after start()

  // Wakes `loop` for a turn; any thread.
  void wake(std::size_t loop);
  // The event loop of `loop`, after start(): a client of another service
  // (the Redis feature store) waits on it from that loop's thread, so a
  // worker waiting for features keeps serving its other connections.
  boost::asio::io_context& context(std::size_t loop);

  // The drain: stops accepting, closes idle connections, answers every
  // request already read (with Connection: close), reads no new request,
  // then ends the loops and returns. Idempotent.
  void stop();

  std::vector<LoopStats> stats() const;
  std::uint64_t refused_connections() const;  // beyond max_connections

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The transport's request framing without a socket, for tests and fuzzing:
// the requests a connection reads from `bytes` when they arrive in pieces
// ending at `cuts` (ascending offsets; none: all at once), with `config`'s
// limits. It stops where a connection stops reading: at a refusal, after a
// request that does not keep the connection alive, or where the bytes end.
struct Framing {
  std::vector<Request> requests;
  int refusal = 0;  // 400, 413 or 431: the reply before the close
  std::string refusal_field;
  bool incomplete = false;  // bytes of a request not yet whole
};
Framing frame_requests(std::string_view bytes, const ServerConfig& config, const std::vector<std::size_t>& cuts = {});

}  // namespace numaserve::http
