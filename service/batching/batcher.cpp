#include "batching/batcher.h"

#include <string>

#include "numaserve/common/duration.h"

namespace numaserve::batching {
namespace {

std::string millis(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

template <typename T>
void bump(std::atomic<T>& counter, T by) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

// One worker's queue and counters. The lock is its owner's but for the
// moments a thief takes a share: uncontended in the steady state.
struct alignas(64) Batcher::Worker {
  mutable std::mutex mutex;
  std::deque<Queued> queue;
  std::atomic<std::size_t> depth{0};  // queue.size(), read without the lock
  std::atomic<bool> idle{false};      // its last turn left it nothing to run: its loop sleeps
  std::atomic<bool> busy{false};      // in a forward
  std::size_t share = 0;              // what its owner left each idle worker to take; under the lock
  std::size_t queued_rows = 0;        // under the lock
  std::atomic<double> seconds_per_row{0};  // its recent forwards', a moving average
  // Counters: one writer, the worker's own thread.
  std::atomic<std::uint64_t> forwards{0}, rows{0}, requests{0}, stolen{0};
  std::atomic<double> forward_seconds{0};
};

Batcher::Batcher(BatcherConfig config) : config_(config) {
  for (std::size_t i = 0; i < std::max<std::size_t>(config_.workers, 1); ++i) {
    workers_.push_back(std::make_unique<Worker>());
  }
}

Batcher::~Batcher() = default;

Status Batcher::admit(std::size_t worker, Clock::time_point deadline) const {
  const Worker& w = *workers_[worker];
  const auto now = Clock::now();
  if (deadline <= now) return make_error(Error::Code::kDeadlineExceeded, "deadline exceeded before the request was queued");
  const std::size_t depth = w.depth.load(std::memory_order_relaxed);
  if (depth >= config_.queue_capacity) {
    return make_error(Error::Code::kUnavailable, "queue full: " + std::to_string(depth) +
                                                     " requests waiting for worker " + std::to_string(worker));
  }
  if (depth == 0) return {};
  std::lock_guard lock(w.mutex);
  if (w.queue.empty()) return {};
  const auto waited = now - w.queue.front().submitted;
  if (waited > config_.max_queue_delay) {
    return make_error(Error::Code::kUnavailable, "overloaded: the oldest request of worker " + std::to_string(worker) +
                                                     " has waited " + millis(waited) + ", longer than the limit of " +
                                                     millis(config_.max_queue_delay));
  }
  // A request admitted now waits for the rows queued before it: refused at
  // once when that takes longer than it may wait, rather than refused after
  // waiting (a 503 should come back at once).
  const auto ahead = to_duration(static_cast<double>(w.queued_rows) * w.seconds_per_row.load(std::memory_order_relaxed));
  if (ahead > config_.max_queue_delay) {
    return make_error(Error::Code::kUnavailable, "overloaded: worker " + std::to_string(worker) + " has " +
                                                     std::to_string(w.queued_rows) + " rows queued, about " +
                                                     millis(ahead) + " of forwards, more than the limit of " +
                                                     millis(config_.max_queue_delay));
  }
  if (deadline != Clock::time_point::max() && now + ahead > deadline) {
    return make_error(Error::Code::kDeadlineExceeded, "deadline exceeded: worker " + std::to_string(worker) + " has about " +
                                                          millis(ahead) + " of forwards queued, more than the " +
                                                          millis(deadline - now) + " left");
  }
  return {};
}

void Batcher::submit(std::size_t worker, Job job) {
  Worker& w = *workers_[worker];
  std::lock_guard lock(w.mutex);
  w.queued_rows += job.batch.rows;
  w.queue.push_back({std::move(job), Clock::now()});
  w.depth.store(w.queue.size(), std::memory_order_relaxed);
}

void Batcher::expire(Worker& w, Clock::time_point now, std::vector<Queued>& aged) const {
  while (!w.queue.empty() && now - w.queue.front().submitted > config_.max_queue_delay) {
    w.queued_rows -= w.queue.front().job.batch.rows;
    aged.push_back(std::move(w.queue.front()));
    w.queue.pop_front();
  }
}

// Up to `most` requests of the front request's Forward, in order, within
// max_batch_items rows; the front one always, however large.
void Batcher::take(Worker& w, std::size_t most, std::vector<Queued>& out) const {
  auto& queue = w.queue;
  if (queue.empty()) return;
  const Forward* key = queue.front().job.forward.get();
  std::size_t rows = 0;
  for (auto it = queue.begin(); it != queue.end() && out.size() < most;) {
    const std::size_t r = it->job.batch.rows;
    if (it->job.forward.get() != key || (!out.empty() && rows + r > config_.max_batch_items)) {
      ++it;
      continue;
    }
    rows += r;
    w.queued_rows -= r;
    out.push_back(std::move(*it));
    it = queue.erase(it);
    if (rows >= config_.max_batch_items) break;
  }
}

// With idle workers about, a worker that took several requests keeps its
// share, puts the rest back in front of its queue and names the idle
// workers to wake: they steal the rest while it runs its own.
void Batcher::share(std::size_t worker, std::vector<Queued>& jobs, Turn& turn) {
  std::vector<std::size_t> idle;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (i != worker && workers_[i]->idle.load(std::memory_order_relaxed)) idle.push_back(i);
  }
  Worker& w = *workers_[worker];
  if (idle.empty()) return;
  if (jobs.size() >= 2) {
    const std::size_t keep = (jobs.size() + idle.size()) / (idle.size() + 1);
    w.share = (jobs.size() - keep + idle.size() - 1) / idle.size();
    for (std::size_t i = jobs.size(); i-- > keep;) {
      w.queued_rows += jobs[i].job.batch.rows;
      w.queue.push_front(std::move(jobs[i]));
    }
    jobs.resize(keep);
  }
  for (std::size_t i = 0; i < idle.size() && i < w.queue.size(); ++i) {
    workers_[idle[i]]->idle.store(false, std::memory_order_relaxed);  // woken once, not by every turn
    turn.wake_workers.push_back(idle[i]);
  }
}

// From the first non-empty queue of another worker, its oldest requests:
// the share its owner left, or else half — whether the owner is in a
// forward or about to start one, both halves then run at once.
bool Batcher::steal(std::size_t thief, Clock::time_point now, std::vector<Queued>& jobs, std::vector<Queued>& aged) {
  for (std::size_t k = 1; k < workers_.size(); ++k) {
    Worker& victim = *workers_[(thief + k) % workers_.size()];
    if (victim.depth.load(std::memory_order_relaxed) == 0) continue;
    std::lock_guard lock(victim.mutex);
    expire(victim, now, aged);
    take(victim, victim.share != 0 ? victim.share : (victim.queue.size() + 1) / 2, jobs);
    victim.depth.store(victim.queue.size(), std::memory_order_relaxed);
    if (!jobs.empty()) return true;
  }
  return false;
}

Turn Batcher::run_turn(std::size_t worker) {
  Worker& w = *workers_[worker];
  w.idle.store(false, std::memory_order_relaxed);
  const auto now = Clock::now();
  Turn turn;
  std::vector<Queued> jobs, aged;
  bool stolen = false;
  if (w.depth.load(std::memory_order_relaxed) != 0) {
    std::lock_guard lock(w.mutex);
    expire(w, now, aged);
    if (!w.queue.empty() && config_.max_batch_delay.count() > 0) {
      std::size_t rows = 0;
      for (const auto& q : w.queue) rows += q.job.forward == w.queue.front().job.forward ? q.job.batch.rows : 0;
      const auto start = w.queue.front().submitted + config_.max_batch_delay;
      if (rows < config_.max_batch_items && now < start) turn.wake_at = start;
    }
    if (!turn.wake_at) {
      w.share = 0;
      take(w, w.queue.size(), jobs);
      share(worker, jobs, turn);
    }
    w.depth.store(w.queue.size(), std::memory_order_relaxed);
  }
  if (jobs.empty() && !turn.wake_at) stolen = steal(worker, now, jobs, aged);

  // A request past its caller's deadline is refused, not run: its answer
  // would come when nobody waits for it any more.
  for (auto it = jobs.begin(); it != jobs.end();) {
    if (it->job.deadline > now) {
      ++it;
      continue;
    }
    const auto waited = now - it->submitted;
    it->job.done(Outcome{make_error(Error::Code::kDeadlineExceeded,
                                    "deadline exceeded after " + millis(waited) + " in the queue; not run"),
                         Timing{to_seconds(waited), 0, 0, 0, false}});
    it = jobs.erase(it);
  }
  for (auto& q : aged) {
    const auto waited = now - q.submitted;
    q.job.done(Outcome{make_error(Error::Code::kUnavailable, "overloaded: waited " + millis(waited) +
                                                                 " in the queue, longer than the limit of " +
                                                                 millis(config_.max_queue_delay)),
                       Timing{to_seconds(waited), 0, 0, 0, false}});
  }
  if (!jobs.empty()) run(w, jobs, stolen);
  turn.more_work = w.depth.load(std::memory_order_relaxed) != 0;
  // Its loop sleeps now until something happens: a worker with work to
  // share may wake it.
  if (!turn.more_work && !turn.wake_at) w.idle.store(true, std::memory_order_relaxed);
  return turn;
}

void Batcher::run(Worker& w, std::vector<Queued>& jobs, bool stolen) {
  w.busy.store(true, std::memory_order_relaxed);
  const auto start = Clock::now();
  std::size_t rows = 0;
  for (const auto& q : jobs) rows += q.job.batch.rows;
  Result<std::vector<float>> scores;
  const Forward& forward = *jobs.front().job.forward;
  if (jobs.size() == 1) {
    scores = forward.run(jobs.front().job.batch);
  } else {
    std::vector<const features::Batch*> parts;
    for (const auto& q : jobs) parts.push_back(&q.job.batch);
    scores = forward.run(features::concat(parts));
  }
  const auto end = Clock::now();
  w.busy.store(false, std::memory_order_relaxed);
  if (scores && scores->size() != rows) {
    scores = make_error(Error::Code::kInternal, "forward returned " + std::to_string(scores->size()) +
                                                    " scores for a batch of " + std::to_string(rows) + " rows");
  }
  bump(w.forwards, std::uint64_t{1});
  bump(w.rows, static_cast<std::uint64_t>(rows));
  bump(w.requests, static_cast<std::uint64_t>(jobs.size()));
  if (stolen) bump(w.stolen, static_cast<std::uint64_t>(jobs.size()));
  bump(w.forward_seconds, to_seconds(end - start));
  const double per_row = to_seconds(end - start) / static_cast<double>(std::max<std::size_t>(rows, 1));
  const double average = w.seconds_per_row.load(std::memory_order_relaxed);
  w.seconds_per_row.store(average == 0 ? per_row : 0.8 * average + 0.2 * per_row, std::memory_order_relaxed);

  std::size_t first = 0;
  for (auto& q : jobs) {
    Outcome outcome{Result<std::vector<float>>(),
                    {to_seconds(start - q.submitted), to_seconds(end - start), rows, jobs.size(), &q == &jobs.front()}};
    if (scores) {
      const auto begin = scores->begin() + static_cast<std::ptrdiff_t>(first);
      outcome.scores = std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(q.job.batch.rows));
    } else {
      outcome.scores = tl::unexpected(scores.error());
    }
    first += q.job.batch.rows;
    q.job.done(std::move(outcome));
  }
}

std::size_t Batcher::queue_depth() const {
  std::size_t depth = 0;
  for (const auto& w : workers_) depth += w->depth.load(std::memory_order_relaxed);
  return depth;
}

std::size_t Batcher::busy_workers() const {
  std::size_t busy = 0;
  for (const auto& w : workers_) busy += w->busy.load(std::memory_order_relaxed) ? 1 : 0;
  return busy;
}

std::vector<WorkerStats> Batcher::stats() const {
  std::vector<WorkerStats> out;
  for (const auto& w : workers_) {
    out.push_back({w->forwards.load(std::memory_order_relaxed), w->rows.load(std::memory_order_relaxed),
                   w->requests.load(std::memory_order_relaxed), w->stolen.load(std::memory_order_relaxed),
                   w->forward_seconds.load(std::memory_order_relaxed), w->depth.load(std::memory_order_relaxed)});
  }
  return out;
}

}  // namespace numaserve::batching
