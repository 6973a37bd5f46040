#include "http/server.h"

#include <linux/filter.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "http/worker.h"
#include "numaserve/common/log.h"

namespace numaserve::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// Descriptors kept back from max_connections for model files, /proc reads
// and connections being refused.
constexpr std::size_t kReservedDescriptors = 256;

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

// One listening socket; the acceptor thread serves them all.
struct Listener {
  Listener(asio::io_context& context, PortKind k) : acceptor(context), retry(context), kind(k) {}
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  const PortKind kind;
  int port = -1;
};

}  // namespace

struct Server::Impl : ServerState {
  std::size_t next_worker = 0;
  std::mutex stop_mutex;
  bool stopped = false;
  asio::io_context accept_context{1};
  Listener main{accept_context, PortKind::kMain};
  std::optional<Listener> admin, grpc;
  std::thread accept_thread;

  Status listen(Listener& listener, int port);
  void close_listener(Listener& listener);
  void accept_next(Listener& listener);
  void accepted(Listener& listener, Worker& worker, tcp::socket socket);
  void retry_later(Listener& listener, const error_code& ec);
};

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
  Worker& worker = *workers[next_worker++ % workers.size()];
  // The socket is created on the worker's own context: it is registered
  // with that worker's epoll once, and only the hand-over is posted.
  listener.acceptor.async_accept(worker.context, [this, &worker, &listener](const error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // stop()
    if (!ec) {
      accepted(listener, worker, std::move(socket));
    } else if (out_of_descriptors(ec)) {
      retry_later(listener, ec);
      return;
    }
    // An accept that had completed when stop() closed the port comes here
    // after it, with its connection: taken, and no next accept on the
    // closed port (it would fail at once, again and again, and stop() would
    // wait for this thread forever).
    if (listener.acceptor.is_open()) accept_next(listener);
  });
}

// Counted against max_connections here, on the one acceptor thread, so the
// limit holds over all workers; a connection beyond it goes to its worker
// all the same, to be answered 503 there.
void Server::Impl::accepted(Listener& listener, Worker& worker, tcp::socket socket) {
  const bool counted = open.load(std::memory_order_relaxed) < max_connections;
  if (counted) {
    open.fetch_add(1, std::memory_order_relaxed);
  } else {
    refused.fetch_add(1, std::memory_order_relaxed);
  }
  asio::post(worker.context, [&worker, counted, kind = listener.kind, socket = std::move(socket)]() mutable {
    worker.adopt(std::move(socket), counted, kind);
  });
}

// Closing a listening socket resets the connections still in its backlog:
// clients whose connect() has returned and who are sending a request. So the
// port first stops answering new handshakes (a socket filter drops every
// SYN without ACK: the client's connect retries it a second later and is
// then refused), the backlog is taken and handed to the workers like any
// connection, and a handshake already past its SYN (an ACK on its way, on
// loopback microseconds) gets a moment to land before the port closes. An
// accepted socket inherits the filter, which drops nothing on an
// established connection.
void Server::Impl::close_listener(Listener& listener) {
  error_code ec;
  listener.retry.cancel();
  listener.acceptor.cancel(ec);  // the pending accept ends, operation_aborted
  std::array<sock_filter, 5> drop_syn = {{
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 13),  // the TCP header's flags (a TCP socket's filter starts there)
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x12),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, 1),  // SYN without ACK: drop
      BPF_STMT(BPF_RET | BPF_K, 0),
      BPF_STMT(BPF_RET | BPF_K, 0xffffffff),  // anything else: keep whole
  }};
  sock_fprog program{static_cast<unsigned short>(drop_syn.size()), drop_syn.data()};
  const int fd = listener.acceptor.native_handle();
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program) != 0) {
    log(LogLevel::kWarning, "cannot stop new handshakes before closing the port; its backlog may be reset",
        {{"error", std::strerror(errno)}});
  }
  // accept4 itself, not Asio's synchronous accept: that one waits for the
  // next connection after ECONNABORTED (a client gone from the backlog),
  // and with the filter no next connection comes. Bounded in time should
  // the filter not hold (a kernel without socket filters).
  const auto protocol = listener.acceptor.local_endpoint(ec).protocol();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    while (std::chrono::steady_clock::now() < until) {
      const int accepted_fd = ::accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (accepted_fd < 0) {
        if (errno == ECONNABORTED || errno == EPROTO || errno == EINTR) continue;
        break;  // EAGAIN: the backlog is empty; else nothing more to take
      }
      Worker& worker = *workers[next_worker++ % workers.size()];
      tcp::socket socket(worker.context);
      socket.assign(protocol, accepted_fd, ec);
      if (ec) {
        ::close(accepted_fd);
        continue;
      }
      accepted(listener, worker, std::move(socket));
    }
  }
  listener.acceptor.close(ec);
}

// Retrying at once would spin: the backlog keeps the connection until a
// descriptor is free.
void Server::Impl::retry_later(Listener& listener, const error_code& ec) {
  log(LogLevel::kWarning, "cannot accept a connection; retrying in 100 ms", {{"error", ec.message()}});
  listener.retry.expires_after(std::chrono::milliseconds(100));
  listener.retry.async_wait([this, &listener](const error_code& e) {
    if (!e) accept_next(listener);
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
  for (auto [port, listener, kind] : {std::tuple{c.admin_port, &s.admin, PortKind::kAdmin}, std::tuple{c.grpc_port, &s.grpc, PortKind::kGrpc}}) {
    if (port < 0) continue;
    listener->emplace(s.accept_context, kind);
    if (auto listening = s.listen(**listener, port); !listening) return listening;
  }

  for (std::size_t i = 0; i < std::max<std::size_t>(c.workers, 1); ++i) {
    s.workers.push_back(std::make_unique<Worker>(s, i));
  }
  for (auto& worker : s.workers) worker->thread = std::thread([w = worker.get()] { w->run(); });
  s.accept_next(s.main);
  if (s.admin) s.accept_next(*s.admin);
  if (s.grpc) s.accept_next(*s.grpc);
  s.accept_thread = std::thread([&s] {
    pthread_setname_np(pthread_self(), "ns-accept");
    s.accept_context.run();
  });
  return {};
}

int Server::port() const { return impl_->main.port; }

int Server::admin_port() const { return impl_->admin ? impl_->admin->port : -1; }

int Server::grpc_port() const { return impl_->grpc ? impl_->grpc->port : -1; }

std::size_t Server::max_connections() const { return impl_->max_connections; }

void Server::wake(std::size_t worker) { impl_->workers.at(worker)->wake(); }

asio::io_context& Server::context(std::size_t worker) { return impl_->workers.at(worker)->context; }

void Server::announce_shutdown() { impl_->closing.store(true, std::memory_order_relaxed); }

void Server::stop(Clock::time_point cut_at) {
  auto& s = *impl_;
  std::lock_guard lock(s.stop_mutex);
  if (s.stopped || !s.accept_thread.joinable()) return;
  s.stopped = true;
  s.closing.store(true, std::memory_order_relaxed);
  s.cut_at = cut_at;
  asio::post(s.accept_context, [&s] {
    s.close_listener(s.main);
    if (s.admin) s.close_listener(*s.admin);
    if (s.grpc) s.close_listener(*s.grpc);
  });
  s.accept_thread.join();
  // After the acceptor's last hand-over: each worker sees its new
  // connections before it starts draining.
  for (auto& worker : s.workers) asio::post(worker->context, [w = worker.get()] { w->drain(); });
  for (auto& worker : s.workers) worker->thread.join();
}

std::vector<WorkerStats> Server::stats() const {
  std::vector<WorkerStats> out;
  for (const auto& worker : impl_->workers) {
    const auto& c = worker->counters;
    auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    out.push_back({get(c.connections), get(c.accepted), get(c.requests), get(c.idle_closed), get(c.timed_out),
                   get(c.rejected), get(c.cut), get(c.retired), worker->busy.share()});
  }
  return out;
}

std::uint64_t Server::refused_connections() const { return impl_->refused.load(std::memory_order_relaxed); }

}  // namespace numaserve::http
