#include "http/server.h"

#include <pthread.h>
#include <sys/resource.h>

#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "http/chunk_line.h"
#include "http/predict_json.h"
#include "numaserve/common/log.h"

namespace numaserve::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

Clock::duration duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Counters have one writer, their loop's thread: a plain load and store
// instead of a locked read-modify-write on the hot path.
void bump(std::atomic<std::uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Handlers a loop runs before giving the application its turn: enough to
// take in everything that arrived together, few enough that a flood of slow
// clients cannot hold a batch back for long.
constexpr std::size_t kHandlersPerTurn = 1024;
// A read takes this much at a time, more for a body known to be larger.
constexpr std::size_t kReadBytes = 16u << 10;
constexpr std::size_t kMaxReadBytes = 1u << 20;
// After a reply with Connection: close the loop keeps reading (and dropping)
// what the client still sends, so that closing does not reset the
// connection before the client has read the reply — a client uploading a
// body over the limit reads its 413 only after it finished sending.
constexpr double kLingerSeconds = 5;
// Descriptors kept back from max_connections for model files, /proc reads
// and connections being refused.
constexpr std::size_t kReservedDescriptors = 256;

std::string decode_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::string path;
  path.reserve(target.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size() && hex(target[i + 1]) >= 0 && hex(target[i + 2]) >= 0) {
      path += static_cast<char>(hex(target[i + 1]) * 16 + hex(target[i + 2]));
      i += 2;
    } else {
      path += target[i];
    }
  }
  return path;
}

// Status line and headers; the body goes out beside it in the same write.
std::string reply_head(const Reply& reply, bool keep_alive, bool http10) {
  std::string head;
  head.reserve(160);
  head += "HTTP/1.1 ";
  head += std::to_string(reply.status);
  head += ' ';
  head += bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(reply.status)));
  head += "\r\nContent-Type: ";
  head += reply.content_type;
  head += "\r\nContent-Length: ";
  head += std::to_string(reply.body.size());
  head += "\r\n";
  for (const auto& [name, value] : reply.headers) {
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  if (!keep_alive) {
    head += "Connection: close\r\n";
  } else if (http10) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  return head;
}

// What the transport refuses by itself: the status is HTTP's own (400, 408,
// 413, 431, 503), the body the service's error format.
Reply error_reply(int status, const std::string& message, const std::string& field) {
  Reply reply;
  reply.status = status;
  reply.body = error_json(Error{Error::Code::kInvalidArgument, message, field});
  return reply;
}

// Beast's request parser over one connection's bytes, with the
// transport's limits: what a Connection reads requests with, and what
// frame_requests() runs without a socket (the fuzz target's entry).
class RequestFramer {
 public:
  enum class Step {
    kNeedMore,    // nothing more without more bytes
    kProgress,    // consumed some: step again
    kHeaderDone,  // a request's header is whole; its body follows
    kRequest,     // a whole request: take() it
    kRefused,     // refusal(): answer it, then close
  };
  struct Refusal {
    int status = 0;
    std::string message, field;
  };
  struct Taken {
    Request request;
    bool keep_alive = true;
    bool head = false;
    bool http10 = false;
  };

  explicit RequestFramer(const ServerConfig& config) : config_(config) {}

  Step step(boost::beast::flat_buffer& buffer) {
    if (!parser_) {
      parser_.emplace();
      // The framer enforces the header limit itself (below): Beast counts
      // it from where a put() starts, so its own limit depends on the cuts.
      parser_->header_limit(std::numeric_limits<std::uint32_t>::max());
      parser_->body_limit(config_.max_body_bytes);
      header_reported_ = false;
      scanned_ = 0;
      chunk_left_ = 0;
      chunk_taken_ = false;
    }
    // A header goes to Beast whole: given the part that has arrived, Beast
    // refuses a malformed line at once, but once it has asked for more it
    // waits for the end of the header before it looks again — so the same
    // bytes were a 400 or a wait for the deadline depending on how they were
    // cut (fuzz_http_framing). The limit counts the whole header, request
    // line and final blank line included.
    if (!header_reported_) {
      const std::string_view bytes(static_cast<const char*>(buffer.data().data()), buffer.size());
      const auto end = bytes.find("\r\n\r\n", scanned_ >= 3 ? scanned_ - 3 : 0);
      const std::size_t header_bytes = end == std::string_view::npos ? bytes.size() : end + 4;
      if (header_bytes > config_.max_header_bytes) {
        return refuse(431,
                      "request header larger than the limit of " + std::to_string(config_.max_header_bytes) + " bytes",
                      "headers");
      }
      if (end == std::string_view::npos) {
        scanned_ = bytes.size();
        return Step::kNeedMore;
      }
    }
    // A chunked body's framing lines likewise go to Beast only whole and
    // checked (chunk_line.h says why).
    std::optional<ChunkLine> line;
    if (header_reported_ && parser_->chunked() && chunk_left_ == 0) {
      const std::string_view bytes(static_cast<const char*>(buffer.data().data()), buffer.size());
      line = scan_chunk_line(bytes, chunk_taken_, config_.max_header_bytes);
      switch (line->state) {
        case ChunkLine::State::kNeedMore: return Step::kNeedMore;
        case ChunkLine::State::kMalformed: return refuse(400, "malformed HTTP request: " + line->reason, "");
        case ChunkLine::State::kTrailersTooLarge:
          return refuse(431,
                        "request trailers larger than the limit of " + std::to_string(config_.max_header_bytes) +
                            " bytes",
                        "headers");
        case ChunkLine::State::kReady: break;
      }
    }
    error_code ec;
    const std::size_t used = parser_->put(buffer.data(), ec);
    buffer.consume(used);
    if (!ec && line) {
      chunk_left_ = line->size;
      chunk_taken_ = true;
    } else if (!ec && chunk_left_ > 0) {
      chunk_left_ -= std::min<std::uint64_t>(chunk_left_, used);
    }
    // The whole header is here and Beast wants more of it: it is malformed
    // in a way Beast cannot tell before more bytes come (a request line
    // ending in a version shorter than "HTTP/1.1"), and would wait for the
    // deadline for a header end that has already passed.
    if (ec == bhttp::error::need_more && !header_reported_ && !parser_->is_header_done()) {
      ec = bhttp::error::bad_version;
    }
    if (ec == bhttp::error::need_more) return Step::kNeedMore;
    if (ec == bhttp::error::body_limit) {
      return refuse(413, "request body larger than the limit of " + std::to_string(config_.max_body_bytes) + " bytes",
                    "body");
    }
    if (ec) return refuse(400, "malformed HTTP request: " + ec.message(), "");
    if (parser_->is_done()) return Step::kRequest;
    if (parser_->is_header_done() && !header_reported_) {
      header_reported_ = true;
      return Step::kHeaderDone;
    }
    return used == 0 ? Step::kNeedMore : Step::kProgress;
  }

  Taken take() {
    auto message = parser_->release();
    parser_.reset();
    Taken taken;
    taken.keep_alive = message.keep_alive();
    taken.head = message.method() == bhttp::verb::head;
    taken.http10 = message.version() < 11;
    taken.request.method = std::string(message.method_string());
    taken.request.path = decode_path(message.target());
    taken.request.body = std::move(message.body());
    return taken;
  }

  // After kHeaderDone: the client waits for "100 Continue" before its body.
  bool expects_continue() const {
    const auto& message = parser_->get();
    return message.version() >= 11 && boost::beast::iequals(message[bhttp::field::expect], "100-continue");
  }
  std::optional<std::uint64_t> body_remaining() const {
    if (!parser_) return std::nullopt;
    const auto remaining = parser_->content_length_remaining();  // a boost::optional
    return remaining ? std::optional(*remaining) : std::nullopt;
  }
  bool mid_request() const { return parser_.has_value(); }
  const Refusal& refusal() const { return refusal_; }
  void reset() { parser_.reset(); }

 private:
  Step refuse(int status, std::string message, std::string field) {
    refusal_ = {status, std::move(message), std::move(field)};
    parser_.reset();
    return Step::kRefused;
  }

  const ServerConfig& config_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool header_reported_ = false;
  std::size_t scanned_ = 0;  // bytes of the header searched for its end so far
  // A chunked body: data bytes of the current chunk Beast has yet to take
  // (0: a chunk-size line is due), and whether a chunk came before it (its
  // data then ends in a CRLF the next line's scan checks).
  std::uint64_t chunk_left_ = 0;
  bool chunk_taken_ = false;
  Refusal refusal_;
};

}  // namespace

class EventLoop;

// One client connection, owned by one loop and only ever touched on its
// thread. While it wants bytes it keeps one operation pending: a read into
// its buffer while it is busy — Asio's reactor reads when epoll reports the
// bytes, with no other system call — or, once it has sat idle for a sweep
// tick, a wait for readability with no buffer at all. So an idle connection
// holds no buffer, and a busy one pays no epoll_ctl per request (re-arming
// a wait costs one).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kWriting, kLingering, kClosed };

  Connection(EventLoop& loop, tcp::socket socket, bool counted, bool admin);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start();
  void refuse(const std::string& message);  // at once, then close
  void send(Reply reply);
  void expire();  // its deadline passed
  void park();    // idle for a while: wait without a buffer
  void drain();   // the server stops: serve a request already sent, else close
  void close();

  Phase phase() const { return phase_; }
  Clock::time_point since() const { return since_; }
  Clock::time_point deadline() const { return deadline_; }
  bool idle() const { return phase_ == Phase::kIdle && buffer_.size() == 0; }

  EventLoop& loop;
  Connection* prev = nullptr;  // the loop's list of its connections
  Connection* next = nullptr;

 private:
  enum class Io { kNone, kRead, kWait };  // the operation pending

  void enter(Phase phase, double timeout_seconds);
  void arm();
  void on_read(const error_code& ec, std::size_t bytes, std::size_t wanted);
  void on_wait(const error_code& ec);
  void got(std::size_t bytes, std::size_t wanted);
  std::size_t read_size() const;
  void pump();
  bool read();
  void parse();
  void header_done();
  void dispatch();
  void reject(int status, const std::string& message, const std::string& field);
  void write(Reply&& reply);
  void written();
  void linger();
  void discard();
  void serve_or_close();
  void release_buffer();

  tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
  RequestFramer framer_;
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
  bool keep_alive_ = true;
  bool head_ = false;
  bool http10_ = false;
};

struct alignas(64) LoopCounters {
  std::atomic<std::uint64_t> connections{0}, accepted{0}, requests{0}, idle_closed{0}, timed_out{0}, rejected{0};
};

// What the loops share.
struct ServerState {
  ServerConfig config;
  Handler* handler = nullptr;
  std::size_t max_connections = 0;
  std::atomic<std::size_t> open{0};  // over all loops
  std::atomic<std::uint64_t> refused{0};
  std::vector<std::unique_ptr<EventLoop>> loops;
};

// One listening socket; the acceptor thread serves both.
struct Listener {
  explicit Listener(asio::io_context& context, bool is_admin) : acceptor(context), retry(context), admin(is_admin) {}
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  const bool admin;
  int port = -1;
};

struct Server::Impl : ServerState {
  std::size_t next_loop = 0;
  std::mutex stop_mutex;
  bool stopped = false;
  asio::io_context accept_context{1};
  Listener main{accept_context, false};
  std::optional<Listener> admin;
  std::thread accept_thread;

  Status listen(Listener& listener, int port);
  void accept_next(Listener& listener);
};

namespace {
thread_local EventLoop* current_loop = nullptr;
}

class EventLoop {
 public:
  EventLoop(ServerState& shared, std::size_t i) : server(shared), index(i) {}

  void run();
  void adopt(tcp::socket socket, bool counted, bool admin);
  void drain();
  void wake() {
    asio::post(context, [] {});
  }

  void link(Connection* c) {
    c->next = first;
    if (first != nullptr) first->prev = c;
    first = c;
  }
  void unlink(Connection* c) {
    (c->prev != nullptr ? c->prev->next : first) = c->next;
    if (c->next != nullptr) c->next->prev = c->prev;
  }

  ServerState& server;
  const std::size_t index;
  LoopCounters counters;
  std::size_t open = 0;  // counted connections, this loop's thread only
  bool draining = false;
  std::array<char, 16u << 10> scratch{};  // where lingering connections drop what they read
  std::thread thread;
  Connection* first = nullptr;
  // Destroyed before the members above: a handler it still holds may own
  // the last reference to a connection, whose destructor unlinks it here.
  asio::io_context context{1};
  asio::steady_timer sweep_timer{context};

 private:
  void arm_sweep();
  Clock::duration tick() const;
};

// --- Connection ---

Connection::Connection(EventLoop& owner, tcp::socket socket, bool counted, bool admin)
    : loop(owner), socket_(std::move(socket)), framer_(owner.server.config), counted_(counted), admin_(admin) {
  loop.link(this);
}

Connection::~Connection() { loop.unlink(this); }

void Connection::enter(Phase phase, double timeout_seconds) {
  phase_ = phase;
  since_ = Clock::now();
  deadline_ = timeout_seconds > 0 ? since_ + duration(timeout_seconds) : Clock::time_point::max();
}

void Connection::start() {
  error_code ec;
  socket_.non_blocking(true, ec);
  // A reply is one write; without this a reply after a 100 Continue would
  // wait for the client's delayed ACK.
  socket_.set_option(tcp::no_delay(true), ec);
  enter(Phase::kIdle, loop.server.config.idle_timeout_seconds);
  if (loop.draining) {
    serve_or_close();
  } else {
    arm();  // a wait: Asio re-arms the descriptor for it, so a request already here is reported
  }
}

void Connection::refuse(const std::string& message) {
  error_code ec;
  socket_.non_blocking(true, ec);
  auto reply = error_reply(503, message, "");
  reply.headers.emplace_back("Retry-After", "1");
  keep_alive_ = false;
  phase_ = Phase::kHandling;
  write(std::move(reply));
}

void Connection::arm() {
  if (io_ != Io::kNone || phase_ == Phase::kClosed) return;
  auto self = shared_from_this();
  if (buffer_.capacity() > 0 && phase_ != Phase::kLingering) {
    io_ = Io::kRead;
    const std::size_t want = read_size();
    socket_.async_read_some(buffer_.prepare(want), [self, want](const error_code& ec, std::size_t n) {
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
void Connection::on_read(const error_code& ec, std::size_t bytes, std::size_t wanted) {
  io_ = Io::kNone;
  if (phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kLingering) {  // the reply went out while this read was pending
    buffer_.clear();
    release_buffer();
    readable_ = true;
    pump();
    return;
  }
  if (ec == asio::error::operation_aborted) {
    if (loop.draining) {
      serve_or_close();
    } else {  // parked
      release_buffer();
      arm();
    }
    return;
  }
  if (ec) {  // the client closed or reset it
    close();
    return;
  }
  buffer_.commit(bytes);
  got(bytes, wanted);
  pump();
}

void Connection::on_wait(const error_code& ec) {
  io_ = Io::kNone;
  if (phase_ == Phase::kClosed) return;
  if (ec == asio::error::operation_aborted) {
    if (loop.draining) serve_or_close();
    return;
  }
  if (ec) {
    close();
    return;
  }
  readable_ = true;
  pump();
}

void Connection::got(std::size_t bytes, std::size_t wanted) {
  // Less than asked for: the socket is empty now, and the next operation
  // reports what comes after.
  readable_ = bytes == wanted;
  needs_more_ = false;
  if (phase_ == Phase::kIdle) enter(Phase::kHeader, loop.server.config.header_timeout_seconds);
}

std::size_t Connection::read_size() const {
  const auto remaining = framer_.body_remaining();
  if (phase_ == Phase::kBody && remaining) return std::clamp<std::size_t>(*remaining, kReadBytes, kMaxReadBytes);
  return kReadBytes;
}

// Reads and parses until the connection has to wait: for bytes, or for the
// application's reply. Re-entered from send() when a reply is written
// while a request is being dispatched; the outer call goes on instead, so a
// pipelined burst is served in a loop, not a recursion.
void Connection::pump() {
  if (pumping_) return;
  pumping_ = true;
  while (phase_ == Phase::kIdle || phase_ == Phase::kHeader || phase_ == Phase::kBody) {
    if (buffer_.size() == 0 || needs_more_) {
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

bool Connection::read() {
  const std::size_t want = read_size();
  error_code ec;
  const std::size_t n = socket_.read_some(buffer_.prepare(want), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    readable_ = false;
    return false;
  }
  if (ec) {
    close();
    return false;
  }
  buffer_.commit(n);
  got(n, want);
  return true;
}

void Connection::parse() {
  switch (framer_.step(buffer_)) {
    case RequestFramer::Step::kNeedMore: needs_more_ = true; break;
    case RequestFramer::Step::kProgress: break;
    case RequestFramer::Step::kHeaderDone: header_done(); break;
    case RequestFramer::Step::kRequest: dispatch(); break;
    case RequestFramer::Step::kRefused: {
      const auto& refusal = framer_.refusal();
      reject(refusal.status, refusal.message, refusal.field);
      break;
    }
  }
}

void Connection::header_done() {
  enter(Phase::kBody, loop.server.config.body_timeout_seconds);
  if (buffer_.size() == 0 && framer_.expects_continue()) {
    // The client waits for this before it sends the body. Sent at once: the
    // socket's buffer is empty between a reply and the next request, so a
    // non-blocking write of 25 bytes does not fall short.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    error_code ec;
    socket_.write_some(asio::buffer(kContinue), ec);
  }
}

void Connection::dispatch() {
  auto taken = framer_.take();
  keep_alive_ = taken.keep_alive && !loop.draining;
  head_ = taken.head;
  http10_ = taken.http10;
  taken.request.admin = admin_;
  enter(Phase::kHandling, 0);
  bump(loop.counters.requests);
  try {
    loop.server.handler->on_request(loop.index, std::move(taken.request), Responder(shared_from_this()));
  } catch (const std::exception& e) {
    // The Responder it took answered 500 as it unwound.
    log(LogLevel::kError, "request handler failed", {{"error", e.what()}});
  }
}

void Connection::send(Reply reply) {
  if (phase_ != Phase::kHandling) return;  // closed while the application had it
  if (loop.draining) keep_alive_ = false;
  write(std::move(reply));
}

void Connection::reject(int status, const std::string& message, const std::string& field) {
  bump(status == 408 ? loop.counters.timed_out : loop.counters.rejected);
  framer_.reset();
  keep_alive_ = false;
  head_ = false;
  http10_ = false;
  phase_ = Phase::kHandling;
  write(error_reply(status, message, field));
}

void Connection::write(Reply&& reply) {
  out_head_ = reply_head(reply, keep_alive_, http10_);  // HEAD: the length of the body not sent
  out_body_ = head_ ? std::string() : std::move(reply.body);
  enter(Phase::kWriting, loop.server.config.body_timeout_seconds);
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
  asio::async_write(socket_, rest, [self = shared_from_this()](const error_code& error, std::size_t) {
    if (self->phase_ != Phase::kWriting) return;
    if (error) {
      self->close();
    } else {
      self->written();
    }
  });
}

void Connection::written() {
  out_head_.clear();
  out_body_ = std::string();
  if (!keep_alive_) {
    linger();
    return;
  }
  enter(Phase::kIdle, loop.server.config.idle_timeout_seconds);
  pump();  // a pipelined request may be waiting in the buffer
}

void Connection::linger() {
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  enter(Phase::kLingering, std::min(kLingerSeconds, loop.server.config.body_timeout_seconds));
  if (io_ == Io::kRead) {  // a 408 while its read is pending: on_read drops the buffer
    socket_.cancel(ec);
    return;
  }
  buffer_.clear();
  release_buffer();
  readable_ = true;
  pump();
}

void Connection::discard() {
  while (readable_) {
    error_code ec;
    const std::size_t n = socket_.read_some(asio::buffer(loop.scratch), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      readable_ = false;
    } else if (ec) {  // the client closed its side too: done
      close();
      return;
    } else if (n < loop.scratch.size()) {
      readable_ = false;
    }
  }
  arm();
}

void Connection::park() {
  error_code ec;
  if (idle() && io_ == Io::kRead) socket_.cancel(ec);  // on_read frees the buffer and waits
}

void Connection::drain() {
  if (phase_ != Phase::kIdle) return;  // mid-request: answered; lingering: ends by itself
  if (io_ != Io::kNone) {
    error_code ec;
    socket_.cancel(ec);  // its handler comes back through serve_or_close()
    return;
  }
  serve_or_close();
}

// The drain's look at an idle connection, whatever epoll has reported so
// far: a request the client sent before the drain began is read and
// answered (with Connection: close); else the connection closes.
void Connection::serve_or_close() {
  if (phase_ != Phase::kIdle) return;
  readable_ = true;
  pump();
  if (idle()) close();
}

void Connection::expire() {
  switch (phase_) {
    case Phase::kIdle:
      bump(loop.counters.idle_closed);
      close();
      break;
    case Phase::kHeader:
      reject(408, "request header not received within " + std::to_string(loop.server.config.header_timeout_seconds) +
                      " s", "headers");
      break;
    case Phase::kBody:
      reject(408, "request body not received within " + std::to_string(loop.server.config.body_timeout_seconds) + " s",
             "body");
      break;
    case Phase::kWriting:
      bump(loop.counters.timed_out);
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

void Connection::release_buffer() {
  if (buffer_.size() == 0) buffer_.shrink_to_fit();
}

void Connection::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  deadline_ = Clock::time_point::max();
  framer_.reset();
  error_code ec;
  socket_.close(ec);  // cancels the pending wait, whose handler drops the last reference
  if (counted_) {
    --loop.open;
    loop.counters.connections.store(loop.open, std::memory_order_relaxed);
    loop.server.open.fetch_sub(1, std::memory_order_relaxed);
  }
}

// --- Responder ---

Responder::~Responder() {
  if (connection_) send(error_reply(500, "internal error: the request was dropped without a reply", ""));
}

void Responder::send(Reply reply) {
  auto connection = std::move(connection_);
  if (!connection) return;
  if (current_loop == &connection->loop) {
    connection->send(std::move(reply));
    return;
  }
  asio::post(connection->loop.context,
             [connection, reply = std::move(reply)]() mutable { connection->send(std::move(reply)); });
}

// --- EventLoop ---

Clock::duration EventLoop::tick() const {
  const auto& c = server.config;
  double shortest = kLingerSeconds;
  for (double t : {c.header_timeout_seconds, c.body_timeout_seconds, c.idle_timeout_seconds}) {
    if (t > 0) shortest = std::min(shortest, t);
  }
  // A deadline is met within a tenth of the shortest timeout, by one pass
  // over the loop's connections (10,000 of them: ~50 us).
  return duration(std::clamp(shortest / 10, 0.01, 0.5));
}

void EventLoop::arm_sweep() {
  const auto period = tick();
  sweep_timer.expires_after(period);
  sweep_timer.async_wait([this, period](const error_code& ec) {
    if (ec) return;
    const auto now = Clock::now();
    for (Connection* c = first; c != nullptr;) {
      Connection* next = c->next;
      const auto keep = c->shared_from_this();
      if (c->deadline() <= now) {
        c->expire();
      } else if (c->idle() && now - c->since() >= period) {
        c->park();  // a busy connection keeps its buffer between requests, an idle one does not
      }
      c = next;
    }
    arm_sweep();
  });
}

void EventLoop::adopt(tcp::socket socket, bool counted, bool admin) {
  auto connection = std::make_shared<Connection>(*this, std::move(socket), counted, admin);
  if (!counted) {
    connection->refuse("too many connections: the limit is " + std::to_string(server.max_connections));
    return;
  }
  ++open;
  counters.connections.store(open, std::memory_order_relaxed);
  bump(counters.accepted);
  connection->start();
}

void EventLoop::drain() {
  draining = true;
  for (Connection* c = first; c != nullptr;) {
    Connection* next = c->next;
    const auto keep = c->shared_from_this();
    c->drain();
    c = next;
  }
}

void EventLoop::run() {
  current_loop = this;
  // The inference worker's name: /placement and `top -H` find it by it, and
  // the OpenMP threads its forwards start inherit it.
  const std::string name = "ns-worker-" + std::to_string(index);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  Handler& handler = *server.handler;
  handler.on_loop_start(index);
  auto work = asio::make_work_guard(context);
  arm_sweep();
  Turn turn;
  while (true) {
    // Take in what the network has (waiting for it only when the
    // application has nothing to do), then give the application its turn.
    if (turn.more_work) {
    } else if (turn.wake_at) {
      context.run_one_until(*turn.wake_at);
    } else {
      context.run_one();
    }
    for (std::size_t i = 0; i < kHandlersPerTurn && context.poll_one() != 0; ++i) {
    }
    try {
      turn = handler.on_turn(index);
    } catch (const std::exception& e) {
      log(LogLevel::kError, "worker turn failed", {{"worker", std::to_string(index)}, {"error", e.what()}});
      turn = Turn{};
    }
    for (std::size_t other : turn.wake_loops) server.loops[other]->wake();
    if (draining && open == 0 && !turn.more_work) break;
  }
  sweep_timer.cancel();
  work.reset();
  context.poll();
  current_loop = nullptr;
}

// --- Server ---

namespace {

// The soft descriptor limit is a relic for select()-based programs; like Go
// and nginx, take the hard limit, and leave a reserve below it.
std::size_t connection_limit(std::size_t configured) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (configured != 0) return configured;
  const std::size_t descriptors = limit.rlim_cur == RLIM_INFINITY ? 1u << 20 : limit.rlim_cur;
  return descriptors > 2 * kReservedDescriptors ? descriptors - kReservedDescriptors : descriptors / 2;
}

bool out_of_descriptors(const error_code& ec) {
  return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
         ec.value() == ENFILE;
}

}  // namespace

Status Server::Impl::listen(Listener& listener, int port) {
  auto failed = [&](const std::string& why) {
    return make_error(Error::Code::kUnavailable, "cannot listen on " + config.host + ":" + std::to_string(port) + ": " + why);
  };
  error_code ec;
  tcp::resolver resolver(accept_context);
  const auto endpoints = resolver.resolve(config.host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) return failed("not an address here (" + ec.message() + ")");
  const tcp::endpoint endpoint = *endpoints.begin();
  auto& acceptor = listener.acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && config.reuse_port) {
    acceptor.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true), ec);
  }
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return failed(ec.message());
  listener.port = acceptor.local_endpoint().port();
  return {};
}

void Server::Impl::accept_next(Listener& listener) {
  EventLoop& loop = *loops[next_loop++ % loops.size()];
  auto& acceptor = listener.acceptor;
  // The socket is created on the loop's own context: it is registered with
  // that loop's epoll once, and only the hand-over is posted.
  acceptor.async_accept(loop.context, [this, &loop, &listener](const error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // stop()
    if (ec) {
      if (out_of_descriptors(ec)) {
        // Retrying at once would spin: the backlog keeps the connection
        // until a descriptor is free.
        log(LogLevel::kWarning, "cannot accept a connection; retrying in 100 ms", {{"error", ec.message()}});
        listener.retry.expires_after(std::chrono::milliseconds(100));
        listener.retry.async_wait([this, &listener](const error_code& e) {
          if (!e) accept_next(listener);
        });
        return;
      }
      accept_next(listener);
      return;
    }
    const bool counted = open.load(std::memory_order_relaxed) < max_connections;
    if (counted) {
      open.fetch_add(1, std::memory_order_relaxed);
    } else {
      refused.fetch_add(1, std::memory_order_relaxed);
    }
    asio::post(loop.context, [&loop, counted, admin = listener.admin, socket = std::move(socket)]() mutable {
      loop.adopt(std::move(socket), counted, admin);
    });
    accept_next(listener);
  });
}

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>()) { impl_->config = std::move(config); }

Server::~Server() { stop(); }

Status Server::start(Handler& handler) {
  auto& s = *impl_;
  const auto& c = s.config;
  s.handler = &handler;
  s.max_connections = connection_limit(c.max_connections);
  if (auto listening = s.listen(s.main, c.port); !listening) return listening;
  if (c.admin_port >= 0) {
    s.admin.emplace(s.accept_context, true);
    if (auto listening = s.listen(*s.admin, c.admin_port); !listening) return listening;
  }

  for (std::size_t i = 0; i < std::max<std::size_t>(c.loops, 1); ++i) s.loops.push_back(std::make_unique<EventLoop>(s, i));
  for (auto& loop : s.loops) loop->thread = std::thread([l = loop.get()] { l->run(); });
  s.accept_next(s.main);
  if (s.admin) s.accept_next(*s.admin);
  s.accept_thread = std::thread([&s] {
    pthread_setname_np(pthread_self(), "ns-accept");
    s.accept_context.run();
  });
  return {};
}

int Server::port() const { return impl_->main.port; }

int Server::admin_port() const { return impl_->admin ? impl_->admin->port : -1; }

std::size_t Server::max_connections() const { return impl_->max_connections; }

void Server::wake(std::size_t loop) { impl_->loops.at(loop)->wake(); }

asio::io_context& Server::context(std::size_t loop) { return impl_->loops.at(loop)->context; }

void Server::stop() {
  auto& s = *impl_;
  std::lock_guard lock(s.stop_mutex);
  if (s.stopped || !s.accept_thread.joinable()) return;
  s.stopped = true;
  asio::post(s.accept_context, [&s] {
    for (Listener* listener : {&s.main, s.admin ? &*s.admin : nullptr}) {
      if (listener == nullptr) continue;
      error_code ec;
      listener->acceptor.close(ec);
      listener->retry.cancel();
    }
  });
  s.accept_thread.join();
  // After the acceptor's last hand-over: each loop sees its new connections
  // before it starts draining.
  for (auto& loop : s.loops) asio::post(loop->context, [l = loop.get()] { l->drain(); });
  for (auto& loop : s.loops) loop->thread.join();
}

std::vector<LoopStats> Server::stats() const {
  std::vector<LoopStats> out;
  for (const auto& loop : impl_->loops) {
    const auto& c = loop->counters;
    auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    out.push_back({get(c.connections), get(c.accepted), get(c.requests), get(c.idle_closed), get(c.timed_out),
                   get(c.rejected)});
  }
  return out;
}

std::uint64_t Server::refused_connections() const { return impl_->refused.load(std::memory_order_relaxed); }

Framing frame_requests(std::string_view bytes, const ServerConfig& config, const std::vector<std::size_t>& cuts) {
  RequestFramer framer(config);
  boost::beast::flat_buffer buffer;
  Framing out;
  std::size_t from = 0;
  for (std::size_t piece = 0; piece <= cuts.size() && from < bytes.size(); ++piece) {
    const std::size_t to = piece < cuts.size() ? std::clamp(cuts[piece], from, bytes.size()) : bytes.size();
    const auto chunk = bytes.substr(from, to - from);
    from = to;
    auto room = buffer.prepare(chunk.size());
    std::memcpy(room.data(), chunk.data(), chunk.size());
    buffer.commit(chunk.size());
    for (bool more = true; more;) {
      switch (framer.step(buffer)) {
        case RequestFramer::Step::kNeedMore: more = false; break;
        case RequestFramer::Step::kProgress:
        case RequestFramer::Step::kHeaderDone: break;
        case RequestFramer::Step::kRequest: {
          auto taken = framer.take();
          out.requests.push_back(std::move(taken.request));
          if (!taken.keep_alive) return out;  // the connection closes after its reply
          break;
        }
        case RequestFramer::Step::kRefused:
          out.refusal = framer.refusal().status;
          out.refusal_field = framer.refusal().field;
          return out;
      }
    }
  }
  out.incomplete = framer.mid_request() || buffer.size() > 0;
  return out;
}

}  // namespace numaserve::http
