#include "http/worker.h"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <map>
#include <string>

#include <boost/asio/executor_work_guard.hpp>

#include "http/http1_connection.h"
#include "http/http2_connection.h"
#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"

namespace numaserve::http {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// Handlers a worker runs before giving the application its turn: enough to
// take in everything that arrived together, few enough that a flood of slow
// clients cannot hold a batch back for long.
constexpr std::size_t kHandlersPerTurn = 1024;

// The worker whose thread this is: a reply sent on it is written at once
// instead of posted (a ReplySink's send).
thread_local const Worker* current_worker = nullptr;

}  // namespace

bool Worker::runs_here() const { return current_worker == this; }

template <typename F>
void Worker::each_connection(F f) {
  for (Connection* c = first; c != nullptr;) {
    Connection* next = c->next;
    const auto keep = c->shared_from_this();
    f(*c);
    c = next;
  }
}

void Worker::link(Connection* c) {
  c->next = first;
  if (first != nullptr) first->prev = c;
  first = c;
}

void Worker::unlink(Connection* c) {
  (c->prev != nullptr ? c->prev->next : first) = c->next;
  if (c->next != nullptr) c->next->prev = c->prev;
}

Clock::duration Worker::tick() const {
  const auto& c = server.config;
  double shortest = kLingerSeconds;
  for (double t : {c.header_timeout_seconds, c.body_timeout_seconds, c.idle_timeout_seconds,
                   draining ? c.shutdown_idle_seconds : 0.0}) {
    if (t > 0) shortest = std::min(shortest, t);
  }
  // A deadline is met within a tenth of the shortest timeout, by one pass
  // over the worker's connections (10,000 of them: ~50 us).
  return to_duration(std::clamp(shortest / 10, 0.01, 0.5));
}

void Worker::arm_sweep() {
  const auto period = tick();
  sweep_timer.expires_after(period);
  sweep_timer.async_wait([this, period](const boost::system::error_code& ec) {
    if (ec) return;
    sweep(period);
    arm_sweep();
  });
}

void Worker::sweep(Clock::duration period) {
  const auto now = Clock::now();
  busy.sample(now, BusyShare::thread_cpu_seconds());
  if (draining && now >= server.cut_at) {
    cut();
    return;
  }
  each_connection([&](Connection& c) {
    if (c.deadline() <= now) {
      c.expire();
    } else if (c.idle() && now - c.since() >= period) {
      c.park();  // a busy connection keeps its buffer between requests, an idle one does not
    }
  });
}

void Worker::adopt(asio::ip::tcp::socket socket, bool counted, PortKind port) {
  std::shared_ptr<Connection> connection;
  if (port == PortKind::kGrpc) {
    connection = std::make_shared<Http2Connection>(*this, std::move(socket), counted);
  } else {
    connection = std::make_shared<Http1Connection>(*this, std::move(socket), counted, port == PortKind::kAdmin);
  }
  if (!counted) {
    connection->refuse("too many connections: the limit is " + std::to_string(server.max_connections));
    return;
  }
  ++open;
  counters.connections.store(open, std::memory_order_relaxed);
  bump(counters.accepted);
  connection->start();
}

void Worker::drain() {
  draining = true;
  arm_sweep();  // at the drain's shorter tick
  each_connection([](Connection& c) { c.drain(); });
}

// The drain's time is over: what is left is closed. A request being read,
// handled or sent is cut, and counted; an idle or lingering connection
// owed its client nothing more.
void Worker::cut() {
  std::map<std::string, std::size_t> by_phase;
  each_connection([&by_phase](Connection& c) {
    if (c.mid_request()) ++by_phase[c.state()];
    c.close();
  });
  std::size_t total = 0;
  LogFields fields = {{"worker", std::to_string(index)}};
  for (const auto& [phase, count] : by_phase) {
    total += count;
    fields.emplace_back(phase, std::to_string(count));
  }
  if (total == 0) return;
  counters.cut.store(counters.cut.load(std::memory_order_relaxed) + total, std::memory_order_relaxed);
  fields.emplace_back("requests", std::to_string(total));
  log(LogLevel::kError, "drain cut requests at the end of the shutdown grace", fields);
}

void Worker::run() {
  current_worker = this;
  // The inference worker's name: /placement and `top -H` find it by it, and
  // the OpenMP threads its forwards start inherit it.
  const std::string name = "ns-worker-" + std::to_string(index);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  Handler& handler = *server.handler;
  handler.on_worker_start(index);
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
    for (std::size_t i = 0; i < kHandlersPerTurn && !handler.turn_due(index) && context.poll_one() != 0; ++i) {
    }
    try {
      turn = handler.on_turn(index);
    } catch (const std::exception& e) {
      log(LogLevel::kError, "worker turn failed", {{"worker", std::to_string(index)}, {"error", e.what()}});
      turn = Turn{};
    }
    for (std::size_t other : turn.wake_workers) server.workers[other]->wake();
    if (draining && open == 0 && !turn.more_work) break;
  }
  sweep_timer.cancel();
  work.reset();
  context.poll();
  current_worker = nullptr;
}

}  // namespace numaserve::http
