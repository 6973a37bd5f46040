#pragma once
// An HTTP/1.1 connection (connection.h). While it wants bytes it keeps one operation pending: a read into
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

#include "http/connection.h"
#include "http/framing.h"
#include "http/handler.h"

namespace numaserve::http {

class Http1Connection final : public Connection, public ReplySink {
 public:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kWriting, kLingering, kClosed };

  Http1Connection(Worker& owner, boost::asio::ip::tcp::socket socket, bool counted, bool admin);

  void start() override;
  void refuse(const std::string& message) override;  // 503 at once, then close
  // The application's reply (ReplySink), from any thread: written at once
  // on the worker's own thread, else posted to it.
  void send(Reply reply) override;
  void dropped() override;  // 500
  void expire() override;
  void park() override;  // wait without a buffer
  void drain() override;
  void close() override;
  bool idle() const override { return phase_ == Phase::kIdle && framer_.buffered() == 0; }
  bool mid_request() const override {
    return phase_ == Phase::kHeader || phase_ == Phase::kBody || phase_ == Phase::kHandling ||
           phase_ == Phase::kWriting;
  }
  const char* state() const override;

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
  bool opens_http2();
  void become_http2();
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
  std::shared_ptr<Http1Connection> self() { return std::static_pointer_cast<Http1Connection>(shared_from_this()); }

  boost::asio::ip::tcp::socket socket_;
  RequestFramer framer_;  // and the bytes read but not yet framed
  std::string out_head_, out_body_;
  Phase phase_ = Phase::kIdle;
  Io io_ = Io::kNone;
  const bool admin_;          // accepted on the admin listener
  bool readable_ = false;     // bytes may be waiting in the socket
  bool needs_more_ = false;   // the parser cannot go on without more bytes
  bool pumping_ = false;
  bool sniffed_ = false;       // an admin connection's first bytes were looked at
  bool closing_idle_ = false;  // the pending operation was cancelled to close an idle connection
  bool keep_alive_ = true;
  bool retiring_ = false;  // this reply ends the connection: max_connection_requests or _age reached
  std::size_t served_ = 0;  // requests handed to the application
  const Clock::time_point retire_at_;  // max_connection_age's end, with its jitter; max(): never
  bool head_ = false;
  bool http10_ = false;
};

}  // namespace numaserve::http
