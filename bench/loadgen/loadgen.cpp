// The benchmark's HTTP client. cpp-httplib is the agent's library; this tool
// is a client of the product, not part of it, and uses it only for the
// closed loop, where each connection's thread blocks on its own request.
#include "loadgen.h"
#include "recorder.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <mutex>
#include <thread>

namespace numaserve::bench {
namespace {

// Closed loop: a thread per connection, each sending its next request when
// the last is answered.
LoadResult closed_loop(const LoadConfig& config, Recorder& recorder) {
  std::mutex mutex;
  std::vector<std::thread> clients;
  for (std::size_t c = 0; c < config.connections; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client(config.host, config.port);
      client.set_keep_alive(true);
      // Headers and body go out in two writes; with Nagle on, the body waits
      // for the ACK the server delays by 40 ms.
      client.set_tcp_nodelay(true);
      client.set_read_timeout(30, 0);
      for (std::size_t index = c;; index += config.connections) {
        const auto sent = Clock::now();
        if (sent >= recorder.end) return;
        const std::size_t body = index % config.bodies.size();
        httplib::Headers headers;
        if (!config.body_headers.empty()) headers.insert(config.body_headers[body]);
        auto res = client.Post(config.path, headers, config.bodies[body], config.content_type);
        const auto done = Clock::now();
        std::lock_guard lock(mutex);
        recorder.record(sent, sent, done, res ? res->status : 0);
      }
    });
  }
  for (auto& t : clients) t.join();
  return recorder.finish(config.seconds);
}

// One connection of the open loop: a raw HTTP/1.1 client over a
// non-blocking socket.
struct Connection {
  int fd = -1;
  bool busy = false;
  Clock::time_point due, sent;
  std::size_t cls = 0;  // its request's class
  std::string in;

  // A whole response at the front of `in`: its status, and it is taken off.
  // 0 while incomplete.
  int take_response() {
    const auto end = in.find("\r\n\r\n");
    if (end == std::string::npos || in.size() < 12) return 0;
    std::size_t length = 0;
    for (std::size_t line = in.find("\r\n"); line < end; line = in.find("\r\n", line + 2)) {
      static constexpr std::string_view kName = "content-length:";
      if (end - line < kName.size() + 2) break;
      bool match = true;
      for (std::size_t i = 0; i < kName.size() && match; ++i) {
        match = std::tolower(static_cast<unsigned char>(in[line + 2 + i])) == kName[i];
      }
      if (match) length = std::stoul(in.substr(line + 2 + kName.size()));
    }
    if (in.size() < end + 4 + length) return 0;
    const int status = std::atoi(in.c_str() + 9);
    in.erase(0, end + 4 + length);
    return status;
  }
};

int connect_to(const LoadConfig& config) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(config.host.c_str(), std::to_string(config.port).c_str(), &hints, &found) != 0) return -1;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Sends the request due at `due` on the next free connection of `pool`
// (from `cursor`); none free, or a send that fails, is recorded as a
// request the client could not send. Returns whether one is now in flight.
bool send_due(std::vector<Connection>& pool, std::size_t& cursor, const std::string& request, std::size_t cls,
              Clock::time_point due, Clock::time_point now, Recorder& recorder) {
  std::size_t k = 0;
  while (k < pool.size() && (pool[(cursor + k) % pool.size()].busy || pool[(cursor + k) % pool.size()].fd < 0)) ++k;
  if (k == pool.size()) {
    recorder.record(due, now, now, 0, false, cls);
    return false;
  }
  Connection& c = pool[(cursor + k) % pool.size()];
  cursor = (cursor + k + 1) % pool.size();
  std::size_t written = 0;
  while (written < request.size()) {
    const ssize_t n = ::send(c.fd, request.data() + written, request.size() - written, MSG_NOSIGNAL);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  c.busy = written == request.size();
  c.due = due;
  c.sent = now;
  c.cls = cls;
  if (!c.busy) recorder.record(due, now, now, 0, false, cls);
  return c.busy;
}

// Reads what arrived on `c` and records each whole reply; a closed or
// failed connection is dropped (its request recorded as failed). Returns
// the replies (and failures) it ended.
std::size_t read_replies(int epoll, Connection& c, Recorder& recorder) {
  char chunk[1 << 16];
  const ssize_t got = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
  if (got <= 0) {
    const bool was_busy = c.busy;
    if (was_busy) recorder.record(c.due, c.sent, Clock::now(), 0, /*cut=*/true, c.cls);
    epoll_ctl(epoll, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    c = Connection{};
    return was_busy ? 1 : 0;
  }
  c.in.append(chunk, static_cast<std::size_t>(got));
  std::size_t ended = 0;
  while (c.busy) {
    const int status = c.take_response();
    if (status == 0) break;
    recorder.record(c.due, c.sent, Clock::now(), status, false, c.cls);
    c.busy = false;
    ++ended;
  }
  return ended;
}

// Each body as the whole HTTP/1.1 request the open loop writes, made once.
std::vector<std::string> request_texts(const LoadConfig& config) {
  std::vector<std::string> requests;
  for (std::size_t i = 0; i < config.bodies.size(); ++i) {
    const auto& body = config.bodies[i];
    std::string extra;
    if (!config.body_headers.empty()) extra = config.body_headers[i].first + ": " + config.body_headers[i].second + "\r\n";
    requests.push_back("POST " + config.path + " HTTP/1.1\r\nHost: " + config.host + "\r\nContent-Type: " +
                       config.content_type + "\r\n" + extra + "Content-Length: " + std::to_string(body.size()) +
                       "\r\n\r\n" + body);
  }
  return requests;
}

// Replies the open loop reads per poll before it sends what is due: each
// takes ~5 us to read, and 256 read in one go (a burst of 503s under a
// flood) sent the requests due meanwhile a millisecond late.
constexpr int kRepliesPerPoll = 8;

// Open loop: one thread that never sleeps — it polls epoll without waiting
// and sends each request the moment it is due, on a free connection of the
// pool — so the generator adds no wake-up of its own to the latencies it
// measures (a thread per connection sleeping until each due time added a
// millisecond here to about 1% of requests). The load generator's CPU is
// its own.
LoadResult open_loop(const LoadConfig& config, Recorder& recorder, Clock::time_point start) {
  std::vector<Connection> pool(config.connections);
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  const auto open = [&](std::size_t i) {
    pool[i].fd = connect_to(config);
    if (pool[i].fd < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    epoll_ctl(epoll, EPOLL_CTL_ADD, pool[i].fd, &ev);
  };
  for (std::size_t i = 0; i < pool.size(); ++i) open(i);
  // Each second: the next `per_tick` idle connections (in turn) closed and
  // opened anew, and every one the server closed opened again.
  const auto per_tick = static_cast<std::size_t>(config.reconnect_per_second * static_cast<double>(pool.size()) + 0.5);
  auto next_tick = start + std::chrono::seconds(1);
  std::size_t turn = 0;
  const auto reconnect = [&] {
    for (std::size_t k = 0, closed = 0; k < pool.size() && closed < per_tick; ++k, turn = (turn + 1) % pool.size()) {
      Connection& c = pool[turn];
      if (c.busy || c.fd < 0) continue;
      epoll_ctl(epoll, EPOLL_CTL_DEL, c.fd, nullptr);
      ::close(c.fd);
      c = Connection{};
      ++closed;
    }
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].fd >= 0) continue;
      open(i);
      if (pool[i].fd >= 0) ++recorder.result.reconnects;
    }
  };
  const std::vector<std::string> requests = request_texts(config);
  const auto interval = seconds(1.0 / config.rate);
  std::size_t next = 0, cursor = 0, in_flight = 0;
  std::vector<epoll_event> events(kRepliesPerPoll);
  while (true) {
    const auto now = Clock::now();
    const auto due = start + interval * static_cast<long>(next);
    if (due < recorder.end && due <= now) {
      const std::size_t body = next % requests.size();
      const std::size_t cls = config.classes.empty() ? 0 : config.classes[body];
      if (send_due(pool, cursor, requests[body], cls, due, now, recorder)) ++in_flight;
      ++next;
      continue;
    }
    if (due >= recorder.end && (in_flight == 0 || now > recorder.end + std::chrono::seconds(30))) break;
    if (config.reconnect_per_second > 0 && now >= next_tick && now < recorder.end) {
      reconnect();
      next_tick += std::chrono::seconds(1);
    }
    const int n = epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 0);
    for (int e = 0; e < n; ++e) in_flight -= read_replies(epoll, pool[events[e].data.u64], recorder);
  }
  for (auto& c : pool) {
    if (c.fd >= 0) ::close(c.fd);
  }
  ::close(epoll);
  return recorder.finish(config.seconds);
}

}  // namespace

LoadResult run_load(const LoadConfig& config) {
  const auto start = Clock::now();
  Recorder recorder;
  recorder.measure_from = start + seconds(config.warmup_seconds);
  recorder.end = recorder.measure_from + seconds(config.seconds);
  recorder.by_class = !config.classes.empty();
  return config.rate > 0 ? open_loop(config, recorder, start) : closed_loop(config, recorder);
}

}  // namespace numaserve::bench
