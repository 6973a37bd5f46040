// The asynchronous client: hiredis's non-blocking protocol driven by the
// worker's Asio loop. hiredis says when it wants to read or write (its ev
// hooks); a Watch turns that into async_wait on the socket, so replies are
// read by the same loop that serves the worker's connections.
#include <hiredis/async.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>

#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "redis/cluster.h"
#include "redis/hiredis_reply.h"

namespace numaserve::redis {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// hiredis's event hooks on one connection's socket. hiredis may free its
// context inside a read (a disconnect); its cleanup hook then clears
// `context`, and a wait that completes later finds it gone.
struct Watch : std::enable_shared_from_this<Watch> {
  Watch(asio::io_context& loop, redisAsyncContext* ac) : descriptor(loop, ac->c.fd), context(ac) {}

  // What hiredis wants for one direction, and whether a wait is out for it.
  struct Interest {
    bool wanted = false;
    bool waiting = false;
  };
  enum Direction { kRead, kWrite };

  asio::posix::stream_descriptor descriptor;
  redisAsyncContext* context;
  Interest interest[2];

  void arm(Direction d) {
    if (context == nullptr || !interest[d].wanted || interest[d].waiting) return;
    interest[d].waiting = true;
    const auto wait = d == kRead ? asio::posix::stream_descriptor::wait_read : asio::posix::stream_descriptor::wait_write;
    descriptor.async_wait(wait, [self = shared_from_this(), d](error_code ec) {
      self->interest[d].waiting = false;
      if (ec || self->context == nullptr || !self->interest[d].wanted) return;
      (d == kRead ? redisAsyncHandleRead : redisAsyncHandleWrite)(self->context);
      self->arm(d);
    });
  }
  void want(Direction d, bool wanted) {
    interest[d].wanted = wanted;
    if (wanted) arm(d);
  }

  static Watch& of(void* data) { return *static_cast<Watch*>(data); }
  static void add_read(void* data) { of(data).want(kRead, true); }
  static void del_read(void* data) { of(data).want(kRead, false); }
  static void add_write(void* data) { of(data).want(kWrite, true); }
  static void del_write(void* data) { of(data).want(kWrite, false); }
  // hiredis closes the socket itself: hand it back without closing it.
  static void cleanup(void* data) {
    Watch& w = of(data);
    w.interest[kRead].wanted = w.interest[kWrite].wanted = false;
    w.context = nullptr;
    (void)w.descriptor.release();
  }
};

}  // namespace

// One pipeline on its way: the replies gathered, the deadline, the caller.
struct Batch {
  explicit Batch(asio::io_context& loop) : deadline(loop) {}
  std::vector<Reply> replies;
  std::size_t left = 0;  // replies (or the disconnect's nulls) still to come
  bool finished = false;
  std::function<void(Outcome&&)> done;
  asio::steady_timer deadline;
};

struct Client::Impl : std::enable_shared_from_this<Impl> {
  Impl(Client& client, asio::io_context& io, Url where, ClientConfig settings)
      : owner(client), loop(io), url(std::move(where)), config(settings), retry(io), connecting(io),
        backoff(settings.reconnect_first_seconds) {}

  Client& owner;
  asio::io_context& loop;
  const Url url;
  const ClientConfig config;
  redisAsyncContext* context = nullptr;  // null while there is no connection
  std::shared_ptr<Watch> watch;
  asio::steady_timer retry;
  asio::steady_timer connecting;  // a connection not up by then is dropped and dialled again
  double backoff;
  std::size_t handshake_left = 0;
  std::size_t in_flight = 0;
  // The last reply, or when the wait for one began: a server that sends
  // nothing for config.stall_seconds while we wait is hung, not slow.
  Clock::time_point progress;
  std::string down_reason;  // logged once per outage, not per attempt
  bool closing = false;
  // when_up()'s, told by up() or by the attempt's failure (schedule_reconnect).
  std::vector<std::function<void(bool)>> waiting_up;

  void connect();
  void schedule_reconnect(const std::string& reason);
  // Drops the connection at once, pending replies and all (hiredis's own
  // disconnect waits for them, which a hung server never sends).
  void drop(const std::string& reason);
  void check_stall();
  void up();
  void record(bool ok);
  void tell_waiting(bool made);
  void finish(const std::shared_ptr<Batch>& batch, std::optional<Failure> failure, std::string message);
  void fail_now(std::function<void(Outcome&&)>& done, Failure failure, const std::string& message) {
    done(Outcome{{}, failure, "feature store " + url.redacted() + ": " + message});
  }
  static Impl& of(const redisAsyncContext* ac) { return *static_cast<Impl*>(ac->data); }
};

namespace {

// A command's place in its batch, hiredis's privdata until its reply.
struct Slot {
  std::shared_ptr<Batch> batch;
  std::size_t index;
};

}  // namespace

void Client::Impl::connect() {
  redisAsyncContext* ac = url.unix_socket ? redisAsyncConnectUnix(url.host.c_str())
                                          : redisAsyncConnect(url.host.c_str(), url.port);
  if (ac == nullptr || ac->err != 0) {
    const std::string why = ac ? ac->errstr : "out of memory";
    if (ac) redisAsyncFree(ac);
    schedule_reconnect(why);
    return;
  }
  ac->data = this;
  watch = std::make_shared<Watch>(loop, ac);
  ac->ev = {watch.get(), &Watch::add_read, &Watch::del_read, &Watch::add_write, &Watch::del_write, &Watch::cleanup};
  redisAsyncSetConnectCallback(ac, [](const redisAsyncContext* c, int status) {
    Impl& self = of(c);
    if (status != REDIS_OK) {  // hiredis frees the context after this
      self.context = nullptr;
      self.schedule_reconnect(c->errstr);
    } else if (self.handshake_left == 0) {
      self.up();
    }
  });
  redisAsyncSetDisconnectCallback(ac, [](const redisAsyncContext* c, int status) {
    Impl& self = of(c);
    self.context = nullptr;
    if (!self.closing) self.schedule_reconnect(status == REDIS_OK ? "closed" : c->errstr);
  });
  context = ac;
  // hiredis's asynchronous connect has no timeout of its own: a host that
  // drops the SYN would hold it for the kernel's two minutes.
  connecting.expires_after(to_duration(config.connect_timeout_seconds));
  connecting.async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closing || self->context == nullptr || self->owner.connected()) return;
    self->drop("not connected within " + std::to_string(self->config.connect_timeout_seconds) + "s");
  });
  const auto handshake = detail::handshake(url);
  handshake_left = handshake.size();
  for (const auto& command : handshake) {
    detail::Argv argv(command);
    redisAsyncCommandArgv(
        ac,
        [](redisAsyncContext* c, void* raw, void* name) {
          Impl& self = of(c);
          if (raw == nullptr || self.closing) return;  // the disconnect says why
          const auto* reply = static_cast<redisReply*>(raw);
          if (reply->type == REDIS_REPLY_ERROR) {
            self.down_reason.clear();  // a refusal is worth a line each time
            log(LogLevel::kError, "feature store refused the connection",
                {{"store", self.url.redacted()}, {"command", static_cast<const char*>(name)},
                 {"error", std::string(reply->str, reply->len)}});
            redisAsyncDisconnect(c);
            return;
          }
          if (--self.handshake_left == 0 && (c->c.flags & REDIS_CONNECTED)) self.up();
        },
        const_cast<char*>(command[0] == "AUTH" ? "AUTH" : "SELECT"), argv.count(), argv.data(),
        argv.lengths.data());
  }
}

void Client::Impl::drop(const std::string& reason) {
  redisAsyncContext* c = context;
  context = nullptr;
  // A connected context's free calls the disconnect callback, which
  // schedules the reconnect; one still connecting does not.
  const bool connected_socket = (c->c.flags & REDIS_CONNECTED) != 0;
  log(LogLevel::kWarning, "feature store connection dropped", {{"store", url.redacted()}, {"reason", reason}});
  redisAsyncFree(c);
  if (!connected_socket) schedule_reconnect(reason);
}

void Client::Impl::check_stall() {
  if (context == nullptr || in_flight == 0 || Clock::now() - progress < to_duration(config.stall_seconds)) return;
  drop("no reply for " + std::to_string(config.stall_seconds) + "s with " + std::to_string(in_flight) +
       " pipelines waiting");
}

void Client::Impl::up() {
  connecting.cancel();
  backoff = config.reconnect_first_seconds;
  owner.breaker_.connected(Clock::now());
  owner.connected_.store(true, std::memory_order_relaxed);
  log(LogLevel::kInfo, "feature store connected", {{"store", url.redacted()}});
  down_reason.clear();
  tell_waiting(true);
}

// Last in up() and schedule_reconnect(): a waiter may send at once.
void Client::Impl::tell_waiting(bool made) {
  std::vector<std::function<void(bool)>> waiting;
  waiting.swap(waiting_up);
  for (auto& then : waiting) then(made);
}

void Client::Impl::schedule_reconnect(const std::string& reason) {
  const bool was_up = owner.connected_.exchange(false, std::memory_order_relaxed);
  if (was_up || down_reason != reason) {
    log(LogLevel::kWarning, "feature store unreachable, reconnecting",
        {{"store", url.redacted()}, {"error", reason}, {"retry_in", std::to_string(backoff) + "s"}});
    down_reason = reason;
  }
  retry.expires_after(to_duration(backoff));
  backoff = std::min(backoff * 2, config.reconnect_last_seconds);
  retry.async_wait([weak = weak_from_this()](error_code ec) {
    if (auto self = weak.lock(); self && !ec && !self->closing) self->connect();
  });
  tell_waiting(false);
}

void Client::Impl::record(bool ok) {
  Breaker& breaker = owner.breaker_;
  if (!breaker.record(ok, Clock::now())) return;
  if (breaker.state() == BreakerState::kClosed) {
    log(LogLevel::kInfo, "feature store breaker closed", {{"store", url.redacted()}});
    return;
  }
  log(LogLevel::kWarning, "feature store breaker open",
      {{"store", url.redacted()}, {"failures_in_row", std::to_string(breaker.failures_in_row())},
       {"probe_in", std::to_string(config.breaker_open_seconds) + "s"}});
}

void Client::Impl::finish(const std::shared_ptr<Batch>& batch, std::optional<Failure> failure, std::string message) {
  if (batch->finished) return;
  batch->finished = true;
  batch->deadline.cancel();
  // A redirect (a cluster's MOVED, ASK) is an answer about its key: the
  // cluster client follows it.
  auto refused = [](const Reply& r) { return r.error && !is_redirect(*r.error); };
  if (!failure && !batch->replies.empty() && std::all_of(batch->replies.begin(), batch->replies.end(), refused)) {
    failure = Failure::kRefused;  // every command refused: the server's state (LOADING, NOAUTH), not one key's
    message = *batch->replies.front().error;
  }
  record(!failure);
  auto done = std::move(batch->done);
  if (failure) {
    fail_now(done, *failure, message);
  } else {
    done(Outcome{std::move(batch->replies), std::nullopt, {}});
  }
}

Client::Client(asio::io_context& loop, Url url, ClientConfig config)
    : impl_(std::make_shared<Impl>(*this, loop, std::move(url), config)),
      breaker_(config.breaker_failures, config.breaker_open_seconds) {
  impl_->connect();
}

Client::~Client() {
  impl_->closing = true;
  impl_->retry.cancel();
  impl_->connecting.cancel();
  if (impl_->context != nullptr) redisAsyncFree(impl_->context);  // pending replies come back null, dropped
}

void Client::when_up(std::function<void(bool up)> then) {
  Impl& s = *impl_;
  if (connected_.load(std::memory_order_relaxed) && s.context != nullptr) {
    then(true);
  } else if (s.context == nullptr) {
    then(false);  // no attempt under way: waiting out a backoff
  } else {
    s.waiting_up.push_back(std::move(then));  // dialling, or AUTH and SELECT out
  }
}

void Client::pipeline(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply /*each*/) {
  send(commands, std::move(done));
}

void Client::send(const std::vector<Command>& commands, std::function<void(Outcome&&)> done) {
  Impl& s = *impl_;
  const auto now = Clock::now();
  if (!connected_.load(std::memory_order_relaxed) || s.context == nullptr) {
    s.fail_now(done, Failure::kDisconnected, "not connected (" + s.down_reason + ")");
    return;
  }
  if (s.in_flight >= s.config.max_in_flight) {
    s.fail_now(done, Failure::kOverloaded, std::to_string(s.in_flight) + " pipelines unanswered");
    return;
  }
  if (!breaker_.admit(now)) {
    s.fail_now(done, Failure::kBreakerOpen, "breaker open after failures");
    return;
  }
  auto batch = std::make_shared<Batch>(s.loop);
  batch->replies.resize(commands.size());
  batch->left = commands.size();
  batch->done = std::move(done);
  if (s.in_flight++ == 0) s.progress = now;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    detail::Argv argv(commands[i]);
    auto slot = std::make_unique<Slot>(Slot{batch, i});
    const int sent = redisAsyncCommandArgv(
        s.context,
        [](redisAsyncContext* c, void* raw, void* data) {
          std::unique_ptr<Slot> mine(static_cast<Slot*>(data));
          Impl& self = Impl::of(c);
          if (self.closing) return;
          Batch& b = *mine->batch;
          if (raw == nullptr) {
            self.finish(mine->batch, Failure::kDisconnected, "connection lost");
          } else {
            b.replies[mine->index] = detail::convert(static_cast<redisReply*>(raw));
            self.progress = Clock::now();
          }
          if (--b.left == 0) {
            --self.in_flight;
            self.finish(mine->batch, std::nullopt, {});
          }
        },
        slot.get(), argv.count(), argv.data(), argv.lengths.data());
    if (sent != REDIS_OK) {  // the context is going away: its disconnect will say so
      batch->left -= commands.size() - i;
      if (batch->left == 0) --s.in_flight;
      s.finish(batch, Failure::kDisconnected, "connection closing");
      return;
    }
    slot.release();
  }
  batch->deadline.expires_after(to_duration(s.config.timeout_seconds));
  batch->deadline.async_wait([weak = s.weak_from_this(), batch](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closing) return;
    self->finish(batch, Failure::kTimeout,
                 "no answer within " + std::to_string(static_cast<int>(self->config.timeout_seconds * 1000)) + " ms");
    self->check_stall();
  });
}

}  // namespace numaserve::redis
