#include "http/http2_connection.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <exception>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "http/grpc_wire.h"
#include "http/worker.h"
#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"

namespace numaserve::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// Streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS):
// gRPC clients queue their calls beyond it; a client that opens more breaks
// the protocol, and nghttp2 ends the session (GOAWAY, PROTOCOL_ERROR).
constexpr std::uint32_t kMaxStreams = 100;
// nghttp2's output is taken in while less than this waits to be written;
// the rest stays in its streams, under HTTP/2's flow control.
constexpr std::size_t kMaxPendingWrite = 256u << 10;

constexpr const char* kDroppedMessage = "internal error: the call was dropped without a reply";

nghttp2_nv header(std::string_view name, std::string_view value) {
  return {const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(name.data())),
          const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

// Where a call's reply goes: its stream, on the connection's worker.
class StreamSink final : public ReplySink {
 public:
  StreamSink(std::shared_ptr<Http2Connection> connection, std::int32_t id) : connection_(std::move(connection)), id_(id) {}
  void send(Reply reply) override { deliver(std::move(reply)); }
  void dropped() override {
    Reply reply;
    reply.status = 500;
    reply.grpc_status = grpc::kInternal;
    reply.body = kDroppedMessage;
    deliver(std::move(reply));
  }

 private:
  void deliver(Reply&& reply) {
    if (connection_->worker.runs_here()) {
      connection_->answer(id_, std::move(reply));
      return;
    }
    asio::post(connection_->worker.context, [c = connection_, id = id_, reply = std::move(reply)]() mutable {
      c->answer(id, std::move(reply));
    });
  }
  std::shared_ptr<Http2Connection> connection_;
  std::int32_t id_;
};

}  // namespace

// nghttp2 calls these while it reads (mem_recv) and writes (mem_send), on
// the worker's thread; they reach the connection through its user data.
struct Http2Connection::Callbacks {
  static Http2Connection& of(void* user) { return *static_cast<Http2Connection*>(user); }

  static int begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      of(user).streams_.try_emplace(frame->hd.stream_id);
    }
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t name_length,
                       const std::uint8_t* value, std::size_t value_length, std::uint8_t, void* user) {
    auto& c = of(user);
    const auto it = c.streams_.find(frame->hd.stream_id);
    if (it == c.streams_.end() || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: nothing we read
    Stream& s = it->second;
    s.header_bytes += name_length + value_length + 32;  // as SETTINGS_MAX_HEADER_LIST_SIZE counts
    if (s.header_bytes > c.worker.server.config.max_header_bytes) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    const std::string_view n(reinterpret_cast<const char*>(name), name_length);
    std::string v(reinterpret_cast<const char*>(value), value_length);
    if (n == ":path") {
      s.path = std::move(v);
    } else if (n == ":method") {
      s.method = std::move(v);
    } else if (n == "content-type") {
      s.content_type = std::move(v);
    } else if (n == "grpc-encoding") {
      s.encoding = std::move(v);
    } else if (n == "grpc-timeout") {
      s.timeout = std::move(v);
    } else if (!n.empty() && n[0] != ':' && n != "te") {
      s.request.headers.emplace_back(std::string(n), std::move(v));
    }
    return 0;
  }

  static int data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data, std::size_t length,
                        void* user) {
    auto& c = of(user);
    const auto it = c.streams_.find(id);
    if (it == c.streams_.end() || it->second.refused) return 0;
    Stream& s = it->second;
    const std::size_t most = c.worker.server.config.max_body_bytes + 5;
    if (s.request.body.size() + length > most) {
      // Answered now; what else it sends is dropped.
      s.refused = true;
      s.request.body = std::string();
      bump(c.worker.counters.rejected);
      c.respond(id, grpc::kResourceExhausted,
                "request message larger than the limit of " + std::to_string(most - 5) + " bytes");
      return 0;
    }
    s.request.body.append(reinterpret_cast<const char*>(data), length);
    return 0;
  }

  static int frame_received(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto& c = of(user);
    if (frame->hd.type == NGHTTP2_GOAWAY) c.going_away_ = true;  // the client leaves: close once idle
    const bool request_end = (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
                             (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (!request_end) return 0;
    const auto it = c.streams_.find(frame->hd.stream_id);
    if (it != c.streams_.end() && !it->second.dispatched && !it->second.refused) c.dispatch(it->first, it->second);
    return 0;
  }

  // A GOAWAY nghttp2 sends for a connection error (a malformed frame, a
  // stream past the limit) ends the session: it reads no more.
  static int frame_sent(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto& c = of(user);
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR && !c.broken_) {
      bump(c.worker.counters.rejected);
      c.going_away_ = true;
      c.broken_ = true;
    }
    return 0;
  }

  static int stream_closed(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
    of(user).streams_.erase(id);
    return 0;
  }

  // The reply message, then its trailers.
  static ssize_t read_reply(nghttp2_session* session, std::int32_t id, std::uint8_t* buffer, std::size_t length,
                            std::uint32_t* flags, nghttp2_data_source*, void* user) {
    auto& c = of(user);
    const auto it = c.streams_.find(id);
    if (it == c.streams_.end()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    Stream& s = it->second;
    const std::size_t n = std::min(length, s.out.size() - s.sent);
    std::copy_n(s.out.data() + s.sent, n, buffer);
    s.sent += n;
    if (s.sent == s.out.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const std::array<nghttp2_nv, 2> trailers = {header("grpc-status", s.status_code),
                                                  header("grpc-message", s.status_message)};
      if (nghttp2_submit_trailer(session, id, trailers.data(), s.status_message.empty() ? 1 : 2) != 0) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      }
    }
    return static_cast<ssize_t>(n);
  }
};

Http2Connection::Http2Connection(Worker& owner, tcp::socket socket, bool counted, bool admin)
    : Connection(owner, counted),
      socket_(std::move(socket)),
      admin_(admin),
      retire_at_(retire_at(owner.server.config.max_connection_age_seconds)) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Callbacks::begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &Callbacks::on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Callbacks::data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Callbacks::frame_received);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Callbacks::stream_closed);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &Callbacks::frame_sent);
  nghttp2_session_server_new(&session_, callbacks, this);
  nghttp2_session_callbacks_del(callbacks);
}

Http2Connection::~Http2Connection() { nghttp2_session_del(session_); }

void Http2Connection::start() {
  error_code ec;
  socket_.non_blocking(true, ec);
  socket_.set_option(tcp::no_delay(true), ec);
  const auto& config = worker.server.config;
  const std::array<nghttp2_settings_entry, 2> settings = {{
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxStreams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(config.max_header_bytes)},
  }};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
  since_ = Clock::now();
  if (worker.draining) go_away(false);
  flush();
  arm_read();
}

void Http2Connection::refuse(const std::string& message) {
  error_code ec;
  socket_.non_blocking(true, ec);
  since_ = Clock::now();
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, 0, NGHTTP2_REFUSED_STREAM,
                        reinterpret_cast<const std::uint8_t*>(message.data()), message.size());
  going_away_ = true;
  flush();
  close_if_done();
}

// Readable: everything the socket holds goes through nghttp2, read into
// the worker's scratch buffer (nghttp2 copies what it keeps), so a
// connection holds no read buffer of its own.
void Http2Connection::arm_read() {
  if (reading_ || closed_) return;
  reading_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = self()](const error_code& ec) { self->on_read(ec, 0); });
}

void Http2Connection::on_read(const error_code& ec, std::size_t) {
  reading_ = false;
  if (closed_) return;
  if (ec) {
    close();
    return;
  }
  since_ = Clock::now();
  while (!closed_) {
    error_code read_ec;
    const std::size_t n = socket_.read_some(asio::buffer(worker.scratch), read_ec);
    if (read_ec == asio::error::would_block || read_ec == asio::error::try_again) break;
    if (read_ec) {  // the client closed or reset it
      close();
      return;
    }
    // Once nghttp2 reads no more (it has ended the session, or gone away
    // with no stream left), what still comes is dropped until the close.
    if (nghttp2_session_want_read(session_) != 0) {
      receiving_ = true;
      const auto used =
          nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(worker.scratch.data()), n);
      receiving_ = false;
      if (used < 0) {  // nghttp2 refused the bytes outright: no GOAWAY can follow
        bump(worker.counters.rejected);
        close();
        return;
      }
    }
    if (n < worker.scratch.size()) break;
  }
  flush();
  // nghttp2 is done with the session: nothing more can be read or sent.
  if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
    going_away_ = true;
    broken_ = true;
  }
  close_if_done();
  arm_read();  // always: the pending wait is what keeps the connection alive until it closes
  update_deadline();
}

void Http2Connection::flush() {
  // Not from nghttp2's own callbacks (a call answered as it is read):
  // on_read flushes once nghttp2 has returned.
  if (closed_ || receiving_) return;
  while (out_.size() < kMaxPendingWrite) {
    const std::uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(session_, &data);
    if (n <= 0) break;
    out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  if (writing_ || out_.empty()) return;
  // A write of its own, non-blocking first; only what the socket did not
  // take waits for an asynchronous one.
  error_code ec;
  const std::size_t n = socket_.write_some(asio::buffer(out_), ec);
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
    close();
    return;
  }
  out_.erase(0, n);
  if (out_.empty()) {
    if (nghttp2_session_want_write(session_) != 0) flush();  // what did not fit below kMaxPendingWrite
    return;
  }
  writing_ = true;
  write_started_ = Clock::now();
  writing_buf_ = std::move(out_);
  out_.clear();
  asio::async_write(socket_, asio::buffer(writing_buf_), [self = self()](const error_code& e, std::size_t) { self->on_written(e); });
}

void Http2Connection::on_written(const error_code& ec) {
  writing_ = false;
  write_started_ = Clock::time_point::max();
  writing_buf_.clear();
  if (closed_) return;
  if (ec) {
    close();
    return;
  }
  since_ = Clock::now();
  flush();
  close_if_done();
  update_deadline();
}

void Http2Connection::dispatch(std::int32_t id, Stream& s) {
  s.dispatched = true;
  s.answered = Clock::now();  // until the application has it: the transport's own answers below
  if (s.method != "POST") {
    const std::array<nghttp2_nv, 1> head = {header(":status", "405")};
    nghttp2_submit_response(session_, id, head.data(), head.size(), nullptr);
    return;
  }
  // gRPC's content types are application/grpc and application/grpc+<codec>.
  if (s.content_type.rfind("application/grpc", 0) != 0) {
    const std::array<nghttp2_nv, 1> head = {header(":status", "415")};
    nghttp2_submit_response(session_, id, head.data(), head.size(), nullptr);
    return;
  }
  if (!s.encoding.empty() && s.encoding != "identity") {
    return respond(id, grpc::kUnimplemented, "grpc-encoding " + s.encoding + " is not supported: send messages uncompressed");
  }
  const auto unframed = grpc::unframe(s.request.body, worker.server.config.max_body_bytes);
  if (unframed.code != grpc::kOk) {
    bump(worker.counters.rejected);
    return respond(id, unframed.code, unframed.error);
  }
  s.answered = Clock::time_point::max();
  Request request = std::move(s.request);
  request.body = std::string(unframed.message);
  request.method = "POST";
  request.path = std::move(s.path);
  request.protocol = Protocol::kGrpc;
  request.admin = admin_;
  if (const auto timeout = grpc::parse_timeout(s.timeout)) request.deadline = s.started + *timeout;
  bump(worker.counters.requests);
  try {
    worker.server.handler->on_request(worker.index, std::move(request), Responder(std::make_shared<StreamSink>(self(), id)));
  } catch (const std::exception& e) {
    log(LogLevel::kError, "request handler failed", {{"error", e.what()}});  // its Responder answered INTERNAL
  }
}

void Http2Connection::answer(std::int32_t id, Reply&& reply) {
  if (closed_) return;
  const auto it = streams_.find(id);
  if (it == streams_.end()) return;  // reset by the client meanwhile
  const int code = reply.grpc_status ? *reply.grpc_status : grpc::code_of_status(reply.status);
  if (code == grpc::kOk) {
    respond(id, grpc::kOk, {}, grpc::frame(reply.body));
  } else {
    respond(id, code, reply.body);
  }
  since_ = Clock::now();
  flush();
  update_deadline();
}

// A reply with a message: headers, the message, then the status in
// trailers. Without: the status alone ("Trailers-Only").
void Http2Connection::respond(std::int32_t id, int code, const std::string& message, std::string body) {
  const auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  s.answered = Clock::now();
  s.status_code = std::to_string(code);
  s.status_message = grpc::percent_encode(message);
  if (code == grpc::kOk) {
    s.out = std::move(body);
    s.sent = 0;
    const std::array<nghttp2_nv, 2> head = {header(":status", "200"), header("content-type", "application/grpc")};
    nghttp2_data_provider provider{};
    provider.read_callback = &Callbacks::read_reply;
    nghttp2_submit_response(session_, id, head.data(), head.size(), &provider);
  } else {
    const std::array<nghttp2_nv, 4> head = {header(":status", "200"), header("content-type", "application/grpc"),
                                            header("grpc-status", s.status_code),
                                            header("grpc-message", s.status_message)};
    nghttp2_submit_response(session_, id, head.data(), s.status_message.empty() ? 3 : 4, nullptr);
  }
}

// No new calls on this connection: the client opens another (elsewhere,
// once the endpoints have dropped this replica). Calls begun are answered.
void Http2Connection::go_away(bool retiring) {
  if (going_away_) return;
  going_away_ = true;
  retiring_ = retiring;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  flush();
}

// Once it has gone away and answered everything, it still reads for
// shutdown_idle_seconds: a call the client sent before it saw the GOAWAY is
// refused by HTTP/2 (REFUSED_STREAM, which clients retry elsewhere) rather
// than lost in a reset connection. A session ended by a protocol error
// closes as soon as its GOAWAY has had that time to arrive: its streams
// will never complete.
void Http2Connection::close_if_done() {
  if (closed_ || !going_away_ || writing_ || !out_.empty()) return;
  if (!broken_ && (!idle() || nghttp2_session_want_write(session_) != 0)) return;
  if (Clock::now() - since_ < to_duration(worker.server.config.shutdown_idle_seconds)) return;
  if (std::exchange(retiring_, false)) bump(worker.counters.retired);
  close();
}

void Http2Connection::update_deadline() {
  const auto& config = worker.server.config;
  deadline_ = Clock::time_point::max();
  if (closed_) return;
  if (idle() || broken_) {
    const double idle_for = going_away_ ? config.shutdown_idle_seconds : config.idle_timeout_seconds;
    if (idle_for > 0 || going_away_) deadline_ = since_ + to_duration(idle_for);
  }
  const double call_time = config.header_timeout_seconds + config.body_timeout_seconds;
  for (const auto& [id, s] : streams_) {
    if (!s.dispatched && call_time > 0) deadline_ = std::min(deadline_, s.started + to_duration(call_time));
    if (s.answered != Clock::time_point::max() && config.body_timeout_seconds > 0) {
      deadline_ = std::min(deadline_, s.answered + to_duration(config.body_timeout_seconds));
    }
  }
  if (writing_ && config.body_timeout_seconds > 0) {
    deadline_ = std::min(deadline_, write_started_ + to_duration(config.body_timeout_seconds));
  }
  if (!going_away_) deadline_ = std::min(deadline_, retire_at_);
}

void Http2Connection::expire() {
  const auto& config = worker.server.config;
  const auto now = Clock::now();
  if (writing_ && now - write_started_ >= to_duration(config.body_timeout_seconds)) {
    bump(worker.counters.timed_out);  // the client does not take its replies
    close();
    return;
  }
  const auto call_time = to_duration(config.header_timeout_seconds + config.body_timeout_seconds);
  std::vector<std::int32_t> late;
  for (const auto& [id, s] : streams_) {
    const bool unread = !s.dispatched && now - s.started >= call_time;
    const bool untaken = s.answered != Clock::time_point::max() &&
                         now - s.answered >= to_duration(config.body_timeout_seconds);
    if (unread || untaken) late.push_back(id);
  }
  for (const auto id : late) {
    bump(worker.counters.timed_out);
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  }
  if (idle() && !going_away_ && deadline_ <= now) {
    bump(worker.counters.idle_closed);
    go_away(false);
  } else if (!going_away_ && now >= retire_at_) {
    go_away(true);
  }
  flush();
  close_if_done();
  update_deadline();
}

void Http2Connection::drain() {
  go_away(false);
  close_if_done();
  update_deadline();
}

void Http2Connection::close() {
  if (closed_) return;
  closed_ = true;
  deadline_ = Clock::time_point::max();
  error_code ec;
  socket_.close(ec);  // cancels the pending wait and write, whose handlers drop their references
  uncount();
}

const char* Http2Connection::state() const {
  if (closed_) return "closed";
  if (!streams_.empty()) return "grpc_calls";
  return writing_ ? "sending_reply" : "idle";
}

}  // namespace numaserve::http
