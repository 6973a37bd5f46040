#include "http/connection.h"

#include <random>
#include <utility>

#include "http/worker.h"
#include "numaserve/common/duration.h"

namespace numaserve::http {

Connection::Connection(Worker& owner, bool counted) : worker(owner), counted_(counted) { worker.link(this); }

// Released without close() (no operation pending held it): uncounted all
// the same, or the drain would wait for it forever.
Connection::~Connection() {
  uncount();
  worker.unlink(this);
}

void Connection::uncount() {
  if (!std::exchange(counted_, false)) return;
  --worker.open;
  worker.counters.connections.store(worker.open, std::memory_order_relaxed);
  worker.server.open.fetch_sub(1, std::memory_order_relaxed);
}

Connection::Clock::time_point retire_at(double age_seconds) {
  using Clock = Connection::Clock;
  if (age_seconds <= 0) return Clock::time_point::max();
  thread_local std::minstd_rand rng(std::random_device{}());
  const double jitter = std::uniform_real_distribution<double>(0.9, 1.1)(rng);
  return Clock::now() + to_duration(age_seconds * jitter);
}

}  // namespace numaserve::http
