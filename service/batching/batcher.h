#pragma once
// The inference workers' batches. Each worker is an event loop
// (http/server.h) that queues the requests it reads on its own connections;
// once per turn of its loop it runs every queued request of one Forward as
// one forward, up to max_batch_items rows. At low load a batch is one
// request and nothing waits for a timer; under load batches grow by
// themselves (max_batch_delay adds an opt-in wait). A worker's queue is
// bounded by count and by age: beyond either a request is refused at once
// (HTTP 503 + Retry-After) instead of waiting without bound.
//
// Balance without a shared queue: connections do not spread evenly, so a
// worker with nothing to do takes queued requests from another (work
// stealing), and a worker that gathered several requests while others are
// idle leaves them a share and names them to be woken. Only then does a
// request cross threads; its completion tells the connection's own loop.
//
// Torch-free and transport-free. The request path reads one way: a job
// carries what runs it (a Forward: the service's model version), and its
// completion hands the scores to whoever asked; nothing here calls back
// into the service to find a model.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "features/extract.h"
#include "numaserve/common/result.h"
#include "numaserve/common/turn.h"

namespace numaserve::batching {

using Clock = std::chrono::steady_clock;

struct BatcherConfig {
  std::size_t workers = 1;
  std::size_t queue_capacity = 64;                       // per worker: requests waiting for a forward
  std::chrono::microseconds max_queue_delay{1'000'000};  // older requests are refused, not run
  std::size_t max_batch_items = 1024;                    // rows per forward; a larger request runs alone
  std::chrono::microseconds max_batch_delay{0};          // wait this long after the first request for more
};

// How a request fared, for the latency histograms.
struct Timing {
  double queue_seconds = 0;    // submitted -> its batch starts
  double forward_seconds = 0;  // the batch's forward
  std::size_t batch_items = 0;
  std::size_t batch_requests = 0;
  bool first_of_batch = false;  // one job of each forward: a batch is counted once
};

struct Outcome {
  Result<std::vector<float>> scores;  // kUnavailable: refused for its age, not run
  Timing timing;
};

// What a job's rows run on: one forward of every row batched with them.
// Jobs of the same Forward (the same object) share batches, never another's:
// a service's Forward is a model version, so a batch never mixes versions.
class Forward {
 public:
  virtual ~Forward() = default;
  virtual Result<std::vector<float>> run(const features::Batch& batch) const = 0;
};

struct Job {
  std::shared_ptr<const Forward> forward;  // held until the job is done
  features::Batch batch;
  // The caller's deadline (a gRPC call's): past it the job is refused
  // (kDeadlineExceeded), not run.
  Clock::time_point deadline = Clock::time_point::max();
  // Called once, on the thread of the worker that ran (or refused) it.
  std::function<void(Outcome&&)> done;
};

struct WorkerStats {
  std::uint64_t forwards = 0;
  std::uint64_t rows = 0;
  std::uint64_t requests = 0;  // run in its forwards, its own and others'
  std::uint64_t stolen = 0;    // of those, queued by another worker
  double forward_seconds = 0;
  std::size_t queued = 0;  // now
};

class Batcher {
 public:
  explicit Batcher(BatcherConfig config);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // On `worker`'s thread, before the request is parsed, so an overloaded
  // worker refuses at the cost of a check: kUnavailable when its queue is
  // full, its oldest request waited longer than max_queue_delay, or the
  // rows queued would take longer than that to run (at its recent speed);
  // kDeadlineExceeded when they would take longer than `deadline` leaves.
  Status admit(std::size_t worker, Clock::time_point deadline = Clock::time_point::max()) const;
  // On `worker`'s thread, after admit().
  void submit(std::size_t worker, Job job);
  // On `worker`'s thread, once per turn of its loop: refuses what aged out
  // and runs one batch of its own queue, or of another worker's.
  Turn run_turn(std::size_t worker);

  std::size_t queue_depth() const;  // over all workers
  std::size_t busy_workers() const;
  std::vector<WorkerStats> stats() const;
  const BatcherConfig& config() const { return config_; }

 private:
  struct Queued {
    Job job;
    Clock::time_point submitted;
  };
  struct Worker;

  void expire(Worker& w, Clock::time_point now, std::vector<Queued>& aged) const;
  void take(Worker& w, std::size_t most, std::vector<Queued>& out) const;
  void share(std::size_t worker, std::vector<Queued>& jobs, Turn& turn);
  bool steal(std::size_t thief, Clock::time_point now, std::vector<Queued>& jobs, std::vector<Queued>& aged);
  void run(Worker& w, std::vector<Queued>& jobs, bool stolen);

  const BatcherConfig config_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace numaserve::batching
