#pragma once
// One client connection, owned by one worker and only ever touched on its
// thread. While it wants bytes it keeps one operation pending: a read into
// its buffer while it is busy — Asio's reactor reads when epoll reports the
// bytes, with no other system call — or, once it has sat idle for a sweep
// tick, a wait for readability with no buffer at all. So an idle connection
// holds no buffer, and a busy one pays no epoll_ctl per request (re-arming
// a wait costs one). Private to http/.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "http/framing.h"
#include "http/handler.h"

namespace numaserve::http {

class Worker;

class Connection final : public ReplySink, public std::enable_shared_from_this<Connection> {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Phase { kIdle, kHeader, kBody, kHandling, kWriting, kLingering, kClosed };

  Connection(Worker& owner, boost::asio::ip::tcp::socket socket, bool counted, bool admin);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start();
  void refuse(const std::string& message);  // 503 at once, then close
  // The application's reply (ReplySink), from any thread: written at once
  // on the worker's own thread, else posted to it.
  void send(Reply reply) override;
  void dropped() override;  // 500
  void expire();  // its deadline passed
  void park();    // idle for a while: wait without a buffer
  // The server stops: a request under way is answered; an idle connection
  // is closed once it has been idle for shutdown_idle_seconds.
  void drain();
  void close();

  Phase phase() const { return phase_; }
  Clock::time_point since() const { return since_; }
  Clock::time_point deadline() const { return deadline_; }
  bool idle() const { return phase_ == Phase::kIdle && framer_.buffered() == 0; }
  // A request is being read, handled or sent: closing now would break it.
  bool mid_request() const {
    return phase_ == Phase::kHeader || phase_ == Phase::kBody || phase_ == Phase::kHandling ||
           phase_ == Phase::kWriting;
  }

  Worker& worker;
  Connection* prev = nullptr;  // the worker's list of its connections
  Connection* next = nullptr;

 private:
  enum class Io { kNone, kRead, kWait };  // the operation pending

  void enter(Phase phase, double timeout_seconds);
  void arm();
  void on_read(const boost::system::error_code& ec, std::size_t bytes, std::size_t wanted);
  void on_wait(const boost::system::error_code& ec);
  void got(std::size_t bytes, std::size_t wanted);
  std::size_t read_size() const;
  void pump();
  bool read();
  void parse();
  void header_done();
  void dispatch();
  void answer(Reply&& reply);
  Reply refusal(int status, const std::string& message, const std::string& field) const;
  void reject(int status, const std::string& message, const std::string& field);
  void write(Reply&& reply);
  void written();
  void linger();
  void discard();
  void close_if_idle();
  bool retires_now() const;
  void serve_or_close();

  boost::asio::ip::tcp::socket socket_;
  RequestFramer framer_;  // and the bytes read but not yet framed
  std::string out_head_, out_body_;
  Phase phase_ = Phase::kIdle;
  Clock::time_point since_ = Clock::now();
  Clock::time_point deadline_ = Clock::time_point::max();
  Io io_ = Io::kNone;
  const bool counted_;        // against max_connections (a refused one is not)
  const bool admin_;          // accepted on the admin listener
  bool readable_ = false;     // bytes may be waiting in the socket
  bool needs_more_ = false;   // the parser cannot go on without more bytes
  bool pumping_ = false;
  bool closing_idle_ = false;  // the pending operation was cancelled to close an idle connection
  bool keep_alive_ = true;
  bool retiring_ = false;  // this reply ends the connection: max_connection_requests or _age reached
  std::size_t served_ = 0;  // requests handed to the application
  const Clock::time_point retire_at_;  // max_connection_age's end, with its jitter; max(): never
  bool head_ = false;
  bool http10_ = false;
};

const char* to_string(Connection::Phase phase);

}  // namespace numaserve::http
