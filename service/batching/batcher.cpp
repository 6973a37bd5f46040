#include "batching/batcher.h"

#include <algorithm>
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

const LevelPolicy& BatcherConfig::policy(std::size_t priority) const {
  static const LevelPolicy kDefault;
  return priority >= 1 && priority <= policies.size() ? policies[priority - 1] : kDefault;
}

std::chrono::microseconds BatcherConfig::timeout(std::size_t priority) const {
  const auto own = policy(priority).timeout;
  return own.count() > 0 ? own : max_queue_delay;
}

Status BatcherConfig::check() const {
  if (priority_levels == 0) return make_error(Error::Code::kInvalidArgument, "want at least one level", "priority_levels");
  if (policies.size() > priority_levels) {
    return make_error(Error::Code::kInvalidArgument,
                      "level " + std::to_string(policies.size()) + " is configured, but there are " +
                          std::to_string(priority_levels) + " levels (--priority-levels)",
                      "priority_level");
  }
  if (default_priority > priority_levels) {
    return make_error(Error::Code::kInvalidArgument,
                      std::to_string(default_priority) + " is not a level: there are " + std::to_string(priority_levels) +
                          " (--priority-levels)",
                      "default_priority");
  }
  for (std::size_t p = 1; p <= policies.size(); ++p) {
    if (policies[p - 1].max_queue_size > queue_capacity) {
      return make_error(Error::Code::kInvalidArgument,
                        "level " + std::to_string(p) + "'s max_queue_size " + std::to_string(policies[p - 1].max_queue_size) +
                            " is above the queue's capacity, " + std::to_string(queue_capacity) + " (--queue-capacity)",
                        "priority_level");
    }
  }
  return {};
}

// One worker's queues, a deque per level, and counters. The lock is its
// owner's but for the moments a thief takes a share: uncontended in the
// steady state.
struct alignas(64) Batcher::Worker {
  explicit Worker(std::size_t levels) : queues(levels), queued_rows(levels, 0), last_submitted(levels) {}
  mutable std::mutex mutex;
  std::vector<std::deque<Queued>> queues;  // [0] is priority 1
  std::vector<std::size_t> queued_rows;    // per level; under the lock
  std::vector<Clock::time_point> last_submitted;  // per level; under the lock
  std::vector<Queued> taken_over;          // refused at its owner's next turn; under the lock
  std::atomic<std::size_t> depth{0};  // requests queued, read without the lock
  std::atomic<bool> idle{false};      // its last turn left it nothing to run: its loop sleeps
  std::atomic<bool> busy{false};      // in a forward
  std::size_t share = 0;              // what its owner left each idle worker to take; under the lock
  bool turn_due = false;              // see Batcher::turn_due; its owner's thread only
  std::atomic<double> seconds_per_row{0};  // its recent forwards', a moving average
  // Counters: one writer, the worker's own thread.
  std::atomic<std::uint64_t> forwards{0}, rows{0}, requests{0}, stolen{0};
  std::atomic<double> forward_seconds{0};

  std::size_t size() const {  // under the lock
    std::size_t n = 0;
    for (const auto& q : queues) n += q.size();
    return n;
  }
  // The oldest request of the highest level waiting; nullptr when none.
  const Queued* front() const {
    for (const auto& q : queues) {
      if (!q.empty()) return &q.front();
    }
    return nullptr;
  }
};

// Written by whichever worker answers or refuses: atomic adds.
struct Batcher::LevelCounters {
  std::atomic<std::uint64_t> answered{0}, refused{0};
  std::atomic<double> wait_seconds{0};
};

namespace {

BatcherConfig at_least_one_level(BatcherConfig config) {
  config.priority_levels = std::max<std::size_t>(config.priority_levels, 1);
  return config;
}

}  // namespace

Batcher::Batcher(BatcherConfig config)
    : config_(at_least_one_level(std::move(config))), levels_(std::make_unique<LevelCounters[]>(config_.priority_levels)) {
  for (std::size_t i = 0; i < std::max<std::size_t>(config_.workers, 1); ++i) {
    workers_.push_back(std::make_unique<Worker>(config_.priority_levels));
  }
}

Batcher::~Batcher() = default;

namespace {

// "" with one level, " priority-2" with several: the messages of a single
// level read as they did before levels.
std::string level_name(const BatcherConfig& config, std::size_t priority) {
  return config.priority_levels == 1 ? "" : " priority-" + std::to_string(priority);
}

Error overloaded(std::string message) { return Error{Error::Code::kResourceExhausted, std::move(message), ""}; }

}  // namespace

Status Batcher::admit(std::size_t worker, std::size_t priority, Clock::time_point deadline, bool count) const {
  const Worker& w = *workers_[worker];
  const auto now = Clock::now();
  if (deadline <= now) return make_error(Error::Code::kDeadlineExceeded, "deadline exceeded before the request was queued");
  priority = std::clamp<std::size_t>(priority, 1, config_.priority_levels);
  const std::size_t l = priority - 1;
  const LevelPolicy& policy = config_.policy(priority);
  const auto refused = [&](std::string message) -> Status {
    if (count) levels_[l].refused.fetch_add(1, std::memory_order_relaxed);
    return tl::unexpected(overloaded(std::move(message)));
  };
  const std::size_t depth = w.depth.load(std::memory_order_relaxed);
  const auto full = [&] {
    return refused("queue full: " + std::to_string(depth) + " requests waiting for worker " + std::to_string(worker));
  };
  if (depth >= config_.queue_capacity && priority == config_.priority_levels) return full();
  if (depth == 0 && config_.queue_capacity > 0) return {};
  const std::string level = level_name(config_, priority);
  std::lock_guard lock(w.mutex);
  if (policy.max_queue_size != 0 && w.queues[l].size() >= policy.max_queue_size) {
    return refused("queue full:" + level + " has " + std::to_string(w.queues[l].size()) +
                   " requests waiting for worker " + std::to_string(worker) + ", its max_queue_size");
  }
  if (w.size() >= config_.queue_capacity) {
    bool lower = false;  // a request to take over
    for (std::size_t k = l + 1; k < w.queues.size(); ++k) lower = lower || !w.queues[k].empty();
    if (!lower) return full();
  }
  // Its wait: the requests of its level and the levels above. Refused at
  // once when that takes longer than it may wait, rather than refused after
  // waiting (a 503 should come back at once).
  const auto timeout = config_.timeout(priority);
  std::size_t rows = 0;
  Clock::time_point oldest = now;
  for (std::size_t k = 0; k <= l; ++k) {
    rows += w.queued_rows[k];
    if (!w.queues[k].empty()) oldest = std::min(oldest, w.queues[k].front().submitted);
  }
  const auto ahead = to_duration(static_cast<double>(rows) * w.seconds_per_row.load(std::memory_order_relaxed));
  if (policy.timeout_action == TimeoutAction::kReject) {
    if (now - oldest > timeout) {
      return refused("overloaded: the oldest" + level + " request of worker " + std::to_string(worker) +
                     " has waited " + millis(now - oldest) + ", longer than the limit of " + millis(timeout));
    }
    if (ahead > timeout) {
      return refused("overloaded: worker " + std::to_string(worker) + " has " + std::to_string(rows) + level +
                     " rows queued, about " + millis(ahead) + " of forwards, more than the limit of " + millis(timeout));
    }
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
  job.priority = std::clamp<std::size_t>(job.priority, 1, config_.priority_levels);
  const auto level_timeout = config_.timeout(job.priority);
  const auto timeout = job.timeout.count() > 0 ? std::min(job.timeout, level_timeout) : level_timeout;
  const std::size_t l = job.priority - 1;
  const auto now = Clock::now();
  std::lock_guard lock(w.mutex);
  w.queued_rows[l] += job.batch.rows;
  w.last_submitted[l] = now;
  w.turn_due = w.turn_due || (job.priority < config_.priority_levels && config_.max_batch_delay.count() == 0);
  w.queues[l].push_back({std::move(job), now, now + timeout});
  if (w.size() > config_.queue_capacity) take_over(w, l + 1);
  w.depth.store(w.size(), std::memory_order_relaxed);
}

void Batcher::take_over(Worker& w, std::size_t priority) {
  for (std::size_t k = w.queues.size(); k-- > priority;) {
    auto& queue = w.queues[k];
    if (queue.empty()) continue;
    w.queued_rows[k] -= queue.back().job.batch.rows;
    queue.back().displaced = true;
    w.taken_over.push_back(std::move(queue.back()));
    queue.pop_back();
    return;
  }
}

void Batcher::refuse(Queued& q, const std::string& why) const {
  const auto waited = Clock::now() - q.submitted;
  levels_[q.job.priority - 1].refused.fetch_add(1, std::memory_order_relaxed);
  q.job.done(Outcome{tl::unexpected(overloaded(why)), Timing{to_seconds(waited), 0, 0, 0, false}});
}

// Moves the requests of reject levels past their timeout to `aged`.
void Batcher::expire(Worker& w, Clock::time_point now, std::vector<Queued>& aged) const {
  for (std::size_t l = 0; l < w.queues.size(); ++l) {
    if (config_.policy(l + 1).timeout_action != TimeoutAction::kReject) continue;
    auto& queue = w.queues[l];
    for (auto it = queue.begin(); it != queue.end();) {
      if (now <= it->expires) {
        ++it;
        continue;
      }
      w.queued_rows[l] -= it->job.batch.rows;
      aged.push_back(std::move(*it));
      it = queue.erase(it);
    }
  }
}

// Up to `most` requests of the highest level waiting, of its first
// request's Forward, in order, within max_batch_items rows; the first
// always, however large. A batch holds one level: a higher level's forward
// is never lengthened by lower rows. While a higher level is active (a
// request of it queued within higher_level_active), a lower level runs one request per
// forward, so what arrives of the higher level waits at most for one
// request's forward, not a whole batch's. A delay level's requests past
// their timeout go after its others.
void Batcher::take(Worker& w, std::size_t most, Clock::time_point now, std::vector<Queued>& out) const {
  std::size_t l = 0;
  while (l < w.queues.size() && w.queues[l].empty()) ++l;
  if (l == w.queues.size()) return;
  auto& queue = w.queues[l];
  if (config_.policy(l + 1).timeout_action == TimeoutAction::kDelay) {
    std::stable_partition(queue.begin(), queue.end(), [now](const Queued& q) { return now <= q.expires; });
  }
  for (std::size_t higher = 0; higher < l; ++higher) {
    if (now - w.last_submitted[higher] < config_.higher_level_active) most = std::min<std::size_t>(most, 1);
  }
  const Forward* key = queue.front().job.forward.get();
  std::size_t rows = 0;
  for (auto it = queue.begin(); it != queue.end() && out.size() < most && rows < config_.max_batch_items;) {
    const std::size_t r = it->job.batch.rows;
    if (it->job.forward.get() != key || (!out.empty() && rows + r > config_.max_batch_items)) {
      ++it;
      continue;
    }
    rows += r;
    w.queued_rows[l] -= r;
    out.push_back(std::move(*it));
    it = queue.erase(it);
  }
}

// With idle workers about, a worker that took several requests keeps its
// share, puts the rest back in front of its queues and names the idle
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
      const std::size_t l = jobs[i].job.priority - 1;
      w.queued_rows[l] += jobs[i].job.batch.rows;
      w.queues[l].push_front(std::move(jobs[i]));
    }
    jobs.resize(keep);
  }
  const std::size_t queued = w.size();
  for (std::size_t i = 0; i < idle.size() && i < queued; ++i) {
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
    take(victim, victim.share != 0 ? victim.share : (victim.size() + 1) / 2, now, jobs);
    victim.depth.store(victim.size(), std::memory_order_relaxed);
    if (!jobs.empty()) return true;
  }
  return false;
}

// Under `w`'s lock: what aged out or was taken over, and its batch unless a
// batch delay has it wait for more.
void Batcher::collect(std::size_t worker, Clock::time_point now, std::vector<Queued>& jobs, std::vector<Queued>& aged,
                      Turn& turn) {
  Worker& w = *workers_[worker];
  for (auto& q : w.taken_over) aged.push_back(std::move(q));
  w.taken_over.clear();
  expire(w, now, aged);
  if (const Queued* first = w.front(); first != nullptr && config_.max_batch_delay.count() > 0) {
    std::size_t rows = 0;
    for (const auto& queue : w.queues) {
      for (const auto& q : queue) rows += q.job.forward == first->job.forward ? q.job.batch.rows : 0;
    }
    const auto start = first->submitted + config_.max_batch_delay;
    if (rows < config_.max_batch_items && now < start) turn.wake_at = start;
  }
  if (!turn.wake_at) {
    w.share = 0;
    take(w, w.size(), now, jobs);
    share(worker, jobs, turn);
  }
  w.depth.store(w.size(), std::memory_order_relaxed);
}

bool Batcher::turn_due(std::size_t worker) const { return workers_[worker]->turn_due; }

Turn Batcher::run_turn(std::size_t worker) {
  Worker& w = *workers_[worker];
  w.idle.store(false, std::memory_order_relaxed);
  w.turn_due = false;
  const auto now = Clock::now();
  Turn turn;
  std::vector<Queued> jobs, aged;
  bool stolen = false;
  if (w.depth.load(std::memory_order_relaxed) != 0) {
    std::lock_guard lock(w.mutex);
    collect(worker, now, jobs, aged, turn);
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
    const std::string level = level_name(config_, q.job.priority);
    if (q.displaced) {
      refuse(q, "overloaded: a higher-priority request took this" + level + " request's place in worker " +
                    std::to_string(worker) + "'s full queue; the lowest priority is refused first");
    } else {
      refuse(q, "overloaded: waited " + millis(waited) + " in the queue, longer than the" + level + " limit of " +
                    millis(q.expires - q.submitted));
    }
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
    LevelCounters& level = levels_[q.job.priority - 1];
    level.answered.fetch_add(1, std::memory_order_relaxed);
    level.wait_seconds.fetch_add(to_seconds(start - q.submitted), std::memory_order_relaxed);
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

std::vector<LevelStats> Batcher::level_stats() const {
  std::vector<LevelStats> out(config_.priority_levels);
  for (std::size_t l = 0; l < out.size(); ++l) {
    out[l].answered = levels_[l].answered.load(std::memory_order_relaxed);
    out[l].refused = levels_[l].refused.load(std::memory_order_relaxed);
    out[l].wait_seconds = levels_[l].wait_seconds.load(std::memory_order_relaxed);
  }
  for (const auto& w : workers_) {
    std::lock_guard lock(w->mutex);
    for (std::size_t l = 0; l < out.size(); ++l) out[l].queued += w->queues[l].size();
  }
  return out;
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
