#include "http/http1_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <exception>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "http/http2_connection.h"
#include "http/worker.h"
#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"

namespace numaserve::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// A read takes this much at a time, more for a body known to be larger.
constexpr std::size_t kReadBytes = 16u << 10;
constexpr std::size_t kMaxReadBytes = 1u << 20;

constexpr const char* kDroppedMessage = "internal error: the request was dropped without a reply";

asio::mutable_buffer room(std::span<char> bytes) { return asio::buffer(bytes.data(), bytes.size()); }

}  // namespace

Http1Connection::Http1Connection(Worker& owner, tcp::socket socket, bool counted, bool admin)
    : Connection(owner, counted),
      socket_(std::move(socket)),
      framer_(owner.server.config),
      admin_(admin),
      retire_at_(retire_at(owner.server.config.max_connection_age_seconds)) {}

void Http1Connection::enter(Phase phase, double timeout_seconds) {
  phase_ = phase;
  since_ = Clock::now();
  deadline_ = timeout_seconds > 0 ? since_ + to_duration(timeout_seconds) : Clock::time_point::max();
}

void Http1Connection::start() {
  error_code ec;
  socket_.non_blocking(true, ec);
  // A reply is one write; without this a reply after a 100 Continue would
  // wait for the client's delayed ACK.
  socket_.set_option(tcp::no_delay(true), ec);
  enter(Phase::kIdle, worker.server.config.idle_timeout_seconds);
  if (worker.draining) {
    drain();  // taken from the backlog as the port closed: its request may be on its way
  } else {
    arm();  // a wait: Asio re-arms the descriptor for it, so a request already here is reported
  }
}

void Http1Connection::refuse(const std::string& message) {
  error_code ec;
  socket_.non_blocking(true, ec);
  auto reply = refusal(503, message, "");
  reply.headers.emplace_back("Retry-After", "1");
  keep_alive_ = false;
  phase_ = Phase::kHandling;
  write(std::move(reply));
}

void Http1Connection::arm() {
  if (io_ != Io::kNone || phase_ == Phase::kClosed) return;
  auto self = this->self();
  if (framer_.holds_buffer() && phase_ != Phase::kLingering) {
    io_ = Io::kRead;
    const std::size_t want = read_size();
    socket_.async_read_some(room(framer_.prepare(want)), [self, want](const error_code& ec, std::size_t n) {
      self->on_read(ec, n, want);
    });
  } else {
    io_ = Io::kWait;
    socket_.async_wait(tcp::socket::wait_read, [self](const error_code& ec) { self->on_wait(ec); });
  }
}

// The buffer is touched only here and while no read is pending: a read
// that was cancelled (to park, drain or linger) or that completed ends in
// this handler, which then does what the cancel was for.
void Http1Connection::on_read(const error_code& ec, std::size_t bytes, std::size_t wanted) {
  io_ = Io::kNone;
  // Cleared whatever came: a cancel that came too late (the read had
  // completed) must not close the connection at a later park's abort.
  const bool closing_idle = std::exchange(closing_idle_, false);
  if (phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kLingering) {  // the reply went out while this read was pending
    framer_.clear();
    framer_.release_buffer();
    readable_ = true;
    pump();
    return;
  }
  if (ec == asio::error::operation_aborted) {
    if (closing_idle) {
      serve_or_close();
    } else {  // parked
      framer_.release_buffer();
      arm();
    }
    return;
  }
  if (ec) {  // the client closed or reset it
    close();
    return;
  }
  framer_.commit(bytes);
  got(bytes, wanted);
  pump();
}

void Http1Connection::on_wait(const error_code& ec) {
  io_ = Io::kNone;
  const bool closing_idle = std::exchange(closing_idle_, false);
  if (phase_ == Phase::kClosed) return;
  if (ec == asio::error::operation_aborted) {
    if (closing_idle) serve_or_close();
    return;
  }
  if (ec) {
    close();
    return;
  }
  readable_ = true;
  pump();
}

void Http1Connection::got(std::size_t bytes, std::size_t wanted) {
  // Less than asked for: the socket is empty now, and the next operation
  // reports what comes after.
  readable_ = bytes == wanted;
  needs_more_ = false;
  if (phase_ == Phase::kIdle) enter(Phase::kHeader, worker.server.config.header_timeout_seconds);
}

std::size_t Http1Connection::read_size() const {
  const auto remaining = framer_.body_remaining();
  if (phase_ == Phase::kBody && remaining) return std::clamp<std::size_t>(*remaining, kReadBytes, kMaxReadBytes);
  return kReadBytes;
}

// Reads and parses until the connection has to wait: for bytes, or for the
// application's reply. Re-entered from answer() when a reply is written
// while a request is being dispatched; the outer call goes on instead, so a
// pipelined burst is served in a loop, not a recursion.
void Http1Connection::pump() {
  if (pumping_) return;
  pumping_ = true;
  while (phase_ == Phase::kIdle || phase_ == Phase::kHeader || phase_ == Phase::kBody) {
    if (framer_.buffered() == 0 || needs_more_) {
      if (!readable_) {
        arm();
        break;
      }
      if (!read()) continue;
    }
    parse();
  }
  if (phase_ == Phase::kLingering) discard();
  pumping_ = false;
}

bool Http1Connection::read() {
  if (admin_ && !std::exchange(sniffed_, true) && opens_http2()) {
    become_http2();
    return false;
  }
  const std::size_t want = read_size();
  error_code ec;
  const std::size_t n = socket_.read_some(room(framer_.prepare(want)), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    readable_ = false;
    return false;
  }
  if (ec) {
    close();
    return false;
  }
  framer_.commit(n);
  got(n, want);
  return true;
}

// The admin port serves gRPC too (the repository extension's RPCs, the
// health check): a client speaking HTTP/2 there opens with its preface,
// "PRI * HTTP/2.0...", which no HTTP/1.1 request begins with. Looked at
// before the first read takes a byte, so the HTTP/2 side reads the
// connection from its start. A preface cut in under 4 bytes (no client
// writes it so) is taken for HTTP/1.1 and refused as a request.
bool Http1Connection::opens_http2() {
  if (io_ != Io::kNone) return false;
  std::array<char, 4> head{};
  const auto n = ::recv(socket_.native_handle(), head.data(), head.size(), MSG_PEEK | MSG_DONTWAIT);
  return n == static_cast<ssize_t>(head.size()) && std::string_view(head.data(), head.size()) == "PRI ";
}

void Http1Connection::become_http2() {
  auto successor = std::make_shared<Http2Connection>(worker, std::move(socket_), true, admin_);
  hand_over_count();
  phase_ = Phase::kClosed;
  deadline_ = Clock::time_point::max();
  successor->start();
}

void Http1Connection::parse() {
  switch (framer_.step()) {
    case RequestFramer::Step::kNeedMore: needs_more_ = true; break;
    case RequestFramer::Step::kProgress: break;
    case RequestFramer::Step::kHeaderDone: header_done(); break;
    case RequestFramer::Step::kRequest: dispatch(); break;
    case RequestFramer::Step::kRefused: {
      const auto& refused = framer_.refusal();
      reject(refused.status, refused.message, refused.field);
      break;
    }
  }
}

void Http1Connection::header_done() {
  enter(Phase::kBody, worker.server.config.body_timeout_seconds);
  if (framer_.buffered() == 0 && framer_.expects_continue()) {
    // The client waits for this before it sends the body. Sent at once: the
    // socket's buffer is empty between a reply and the next request, so a
    // non-blocking write of 25 bytes does not fall short.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    error_code ec;
    socket_.write_some(asio::buffer(kContinue), ec);
  }
}

void Http1Connection::dispatch() {
  auto taken = framer_.take();
  ++served_;
  retiring_ = taken.keep_alive && retires_now();
  keep_alive_ = taken.keep_alive && !retiring_ && !worker.server.closing.load(std::memory_order_relaxed);
  head_ = taken.head;
  http10_ = taken.http10;
  taken.request.admin = admin_;
  enter(Phase::kHandling, 0);
  bump(worker.counters.requests);
  try {
    worker.server.handler->on_request(worker.index, std::move(taken.request), Responder(self()));
  } catch (const std::exception& e) {
    // The Responder it took answered 500 as it unwound.
    log(LogLevel::kError, "request handler failed", {{"error", e.what()}});
  }
}

// At its request or age limit, and nothing pipelined behind this request:
// what the client already sent is answered before the connection ends.
bool Http1Connection::retires_now() const {
  const std::size_t most = worker.server.config.max_connection_requests;
  const bool due = (most > 0 && served_ >= most) || Clock::now() >= retire_at_;
  return due && framer_.buffered() == 0;
}

void Http1Connection::send(Reply reply) {
  if (worker.runs_here()) {
    answer(std::move(reply));
    return;
  }
  asio::post(worker.context, [self = self(), reply = std::move(reply)]() mutable {
    self->answer(std::move(reply));
  });
}

void Http1Connection::dropped() {
  if (worker.runs_here()) {
    answer(refusal(500, kDroppedMessage, ""));
    return;
  }
  // The application is asked for the body on the worker's thread, where it is always called.
  asio::post(worker.context, [self = self()] { self->answer(self->refusal(500, kDroppedMessage, "")); });
}

void Http1Connection::answer(Reply&& reply) {
  if (phase_ != Phase::kHandling) return;  // closed while the application had it
  if (worker.server.closing.load(std::memory_order_relaxed)) keep_alive_ = false;
  write(std::move(reply));
}

Reply Http1Connection::refusal(int status, const std::string& message, const std::string& field) const {
  Reply reply = worker.server.handler->refusal(status, message, field);
  reply.status = status;
  return reply;
}

void Http1Connection::reject(int status, const std::string& message, const std::string& field) {
  bump(status == 408 ? worker.counters.timed_out : worker.counters.rejected);
  framer_.reset();
  keep_alive_ = false;
  head_ = false;
  http10_ = false;
  phase_ = Phase::kHandling;
  write(refusal(status, message, field));
}

void Http1Connection::write(Reply&& reply) {
  out_head_ = reply_head(reply, keep_alive_, http10_);  // HEAD: the length of the body not sent
  out_body_ = head_ ? std::string() : std::move(reply.body);
  enter(Phase::kWriting, worker.server.config.body_timeout_seconds);
  // One non-blocking writev; only what the socket did not take goes through
  // an asynchronous write.
  std::array<asio::const_buffer, 2> buffers = {asio::buffer(out_head_), asio::buffer(out_body_)};
  error_code ec;
  const std::size_t n = socket_.write_some(buffers, ec);
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
    close();
    return;
  }
  if (n == out_head_.size() + out_body_.size()) {
    written();
    return;
  }
  std::vector<asio::const_buffer> rest;
  if (n < out_head_.size()) rest.push_back(asio::buffer(out_head_) + n);
  rest.push_back(asio::buffer(out_body_) + (n > out_head_.size() ? n - out_head_.size() : 0));
  asio::async_write(socket_, rest, [self = self()](const error_code& error, std::size_t) {
    if (self->phase_ != Phase::kWriting) return;
    if (error) {
      self->close();
    } else {
      self->written();
    }
  });
}

void Http1Connection::written() {
  out_head_.clear();
  out_body_ = std::string();
  if (!keep_alive_) {
    if (std::exchange(retiring_, false)) bump(worker.counters.retired);
    linger();
    return;
  }
  enter(Phase::kIdle, worker.server.config.idle_timeout_seconds);
  pump();  // a pipelined request may be waiting in the buffer
}

void Http1Connection::linger() {
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  enter(Phase::kLingering, std::min(kLingerSeconds, worker.server.config.body_timeout_seconds));
  if (io_ == Io::kRead) {  // a 408 while its read is pending: on_read drops the buffer
    socket_.cancel(ec);
    return;
  }
  framer_.clear();
  framer_.release_buffer();
  readable_ = true;
  pump();
}

void Http1Connection::discard() {
  while (readable_) {
    error_code ec;
    const std::size_t n = socket_.read_some(asio::buffer(worker.scratch), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      readable_ = false;
    } else if (ec) {  // the client closed its side too: done
      close();
      return;
    } else if (n < worker.scratch.size()) {
      readable_ = false;
    }
  }
  arm();
}

void Http1Connection::park() {
  error_code ec;
  if (idle() && io_ == Io::kRead) socket_.cancel(ec);  // on_read frees the buffer and waits
}

// Not at once: a client in a closed loop sends its next request
// microseconds after its last reply, and a connection closed in between
// breaks that request. An idle connection stays open, serving what comes,
// until it has been idle for shutdown_idle_seconds (expire()).
void Http1Connection::drain() {
  if (phase_ != Phase::kIdle) return;  // mid-request: answered; lingering: ends by itself
  deadline_ = std::min(deadline_, since_ + to_duration(worker.server.config.shutdown_idle_seconds));
  if (deadline_ <= Clock::now()) {
    close_if_idle();
  } else {
    arm();
  }
}

void Http1Connection::close_if_idle() {
  if (io_ != Io::kNone) {
    closing_idle_ = true;
    error_code ec;
    socket_.cancel(ec);  // its handler comes back through serve_or_close()
    return;
  }
  serve_or_close();
}

// The drain's last look at an idle connection, whatever epoll has reported
// so far: a request the client has sent is read and answered (with
// Connection: close); else the connection closes.
void Http1Connection::serve_or_close() {
  if (phase_ != Phase::kIdle) return;
  readable_ = true;
  pump();
  if (idle()) close();
}

void Http1Connection::expire() {
  const auto& config = worker.server.config;
  switch (phase_) {
    case Phase::kIdle:
      if (worker.draining) {
        close_if_idle();
      } else {
        bump(worker.counters.idle_closed);
        close();
      }
      break;
    case Phase::kHeader:
      reject(408, "request header not received within " + std::to_string(config.header_timeout_seconds) + " s",
             "headers");
      break;
    case Phase::kBody:
      reject(408, "request body not received within " + std::to_string(config.body_timeout_seconds) + " s", "body");
      break;
    case Phase::kWriting:
      bump(worker.counters.timed_out);
      close();
      break;
    case Phase::kLingering:
      close();
      break;
    case Phase::kHandling:
    case Phase::kClosed:
      break;
  }
}

void Http1Connection::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  deadline_ = Clock::time_point::max();
  framer_.reset();
  error_code ec;
  socket_.close(ec);  // cancels the pending wait, whose handler drops the last reference
  uncount();
}

const char* Http1Connection::state() const {
  switch (phase_) {
    case Phase::kIdle: return "idle";
    case Phase::kHeader: return "reading_header";
    case Phase::kBody: return "reading_body";
    case Phase::kHandling: return "handling";
    case Phase::kWriting: return "sending_reply";
    case Phase::kLingering: return "lingering";
    case Phase::kClosed: return "closed";
  }
  return "unknown";
}

}  // namespace numaserve::http
