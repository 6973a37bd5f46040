#pragma once
// The inference workers and the bounded queue in front of them. A fixed
// pool of workers (each pinned by the caller's on_start hook, typically to
// its own cores) takes requests from one queue; when the queue is full a
// request is refused at once (HTTP 503 + Retry-After) instead of waiting
// without bound. With dynamic batching on, a worker that takes a request
// also takes the queued requests of the same model, up to max_batch_items
// rows, waiting at most max_delay after the first one arrived — Triton's
// dynamic batcher, in miniature.
//
// Torch-free: the forward is a function handed in, so the scheduling is
// tested on its own and the model part stays the only torch code.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "features/extract.h"
#include "numaserve/common/result.h"

namespace numaserve::batching {

struct SchedulerConfig {
  std::size_t workers = 1;
  std::size_t queue_capacity = 64;  // requests waiting, not counting those being run
  bool dynamic_batching = false;
  std::size_t max_batch_items = 1024;
  std::chrono::microseconds max_delay{500};
};

// How a request fared inside the scheduler, for the latency histograms.
struct Timing {
  double queue_seconds = 0;    // enqueue -> its batch starts
  double forward_seconds = 0;  // the batch's forward
  std::size_t batch_items = 0;
  std::size_t batch_requests = 0;
};

struct Outcome {
  Result<std::vector<float>> scores;
  Timing timing;
};

// Runs one batch of `model` (an index the caller defines), joined from
// `requests` requests, on the calling worker.
using ForwardFn =
    std::function<Result<std::vector<float>>(std::size_t model, const features::Batch& batch, std::size_t requests)>;
// Called first on each worker thread, with its index.
using WorkerStartFn = std::function<void(std::size_t worker)>;

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, ForwardFn forward, WorkerStartFn on_start);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // kUnavailable when the queue is full or the scheduler is stopping.
  Result<std::future<Outcome>> submit(std::size_t model, features::Batch batch);

  // Runs everything already queued, then ends the workers. Idempotent.
  void stop();

  std::size_t queue_depth() const;
  std::size_t busy_workers() const;
  const SchedulerConfig& config() const { return config_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Job {
    std::size_t model = 0;
    features::Batch batch;
    Clock::time_point enqueued;
    std::promise<Outcome> promise;
  };

  void work(std::size_t worker);
  std::vector<Job> take_batch(std::unique_lock<std::mutex>& lock);
  void run(std::vector<Job>& jobs);

  const SchedulerConfig config_;
  const ForwardFn forward_;
  const WorkerStartFn on_start_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  std::size_t busy_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace numaserve::batching
