#include "batching/scheduler.h"

#include <pthread.h>

#include <string>

namespace numaserve::batching {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, ForwardFn forward, WorkerStartFn on_start)
    : config_(config), forward_(std::move(forward)), on_start_(std::move(on_start)) {
  const std::size_t workers = config_.workers == 0 ? 1 : config_.workers;
  threads_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i) threads_.emplace_back([this, i] { work(i); });
}

Scheduler::~Scheduler() { stop(); }

Result<std::future<Outcome>> Scheduler::submit(std::size_t model, features::Batch batch) {
  std::unique_lock lock(mutex_);
  if (stopping_) return make_error(Error::Code::kUnavailable, "shutting down: not taking new requests");
  if (queue_.size() >= config_.queue_capacity) {
    return make_error(Error::Code::kUnavailable,
                      "queue full: " + std::to_string(queue_.size()) + " requests waiting for " +
                          std::to_string(threads_.size()) + " workers");
  }
  Job& job = queue_.emplace_back();
  job.model = model;
  job.batch = std::move(batch);
  job.enqueued = Clock::now();
  auto future = job.promise.get_future();
  lock.unlock();
  // Every waiter: an idle worker should start at once, and a worker that
  // is gathering a dynamic batch should see the new request.
  wake_.notify_all();
  return future;
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

std::size_t Scheduler::queue_depth() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::size_t Scheduler::busy_workers() const {
  std::lock_guard lock(mutex_);
  return busy_;
}

void Scheduler::work(std::size_t worker) {
  // A name per worker: /placement and `top -H` find the worker's threads by
  // it, and the OpenMP threads it starts inherit it.
  const std::string name = "ns-worker-" + std::to_string(worker);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  if (on_start_) on_start_(worker);
  std::unique_lock lock(mutex_);
  while (true) {
    std::vector<Job> jobs = take_batch(lock);
    if (jobs.empty()) return;  // stopping, and nothing left to run
    ++busy_;
    lock.unlock();
    run(jobs);
    lock.lock();
    --busy_;
  }
}

std::vector<Scheduler::Job> Scheduler::take_batch(std::unique_lock<std::mutex>& lock) {
  wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
  std::vector<Job> jobs;
  if (queue_.empty()) return jobs;
  jobs.push_back(std::move(queue_.front()));
  queue_.pop_front();
  if (!config_.dynamic_batching) return jobs;

  const std::size_t model = jobs.front().model;
  std::size_t items = jobs.front().batch.rows;
  const auto deadline = jobs.front().enqueued + config_.max_delay;
  while (items < config_.max_batch_items) {
    for (auto it = queue_.begin(); it != queue_.end() && items < config_.max_batch_items;) {
      if (it->model == model && items + it->batch.rows <= config_.max_batch_items) {
        items += it->batch.rows;
        jobs.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (items >= config_.max_batch_items || stopping_ || Clock::now() >= deadline) break;
    wake_.wait_until(lock, deadline);
  }
  return jobs;
}

void Scheduler::run(std::vector<Job>& jobs) {
  const auto start = Clock::now();
  std::size_t rows = 0;
  for (const auto& job : jobs) rows += job.batch.rows;
  Result<std::vector<float>> scores;
  if (jobs.size() == 1) {
    scores = forward_(jobs.front().model, jobs.front().batch, 1);
  } else {
    std::vector<const features::Batch*> parts;
    for (const auto& job : jobs) parts.push_back(&job.batch);
    scores = forward_(jobs.front().model, features::concat(parts), jobs.size());
  }
  const auto end = Clock::now();
  if (scores && scores->size() != rows) {
    scores = make_error(Error::Code::kInternal, "forward returned " + std::to_string(scores->size()) +
                                                    " scores for a batch of " + std::to_string(rows) + " rows");
  }
  std::size_t first = 0;
  for (auto& job : jobs) {
    Outcome outcome{Result<std::vector<float>>(), {seconds(start - job.enqueued), seconds(end - start), rows, jobs.size()}};
    if (scores) {
      const auto begin = scores->begin() + static_cast<std::ptrdiff_t>(first);
      outcome.scores = std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(job.batch.rows));
    } else {
      outcome.scores = tl::unexpected(scores.error());
    }
    first += job.batch.rows;
    job.promise.set_value(std::move(outcome));
  }
}

}  // namespace numaserve::batching
