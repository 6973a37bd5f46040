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
// Priority levels (Triton's dynamic_batching priority_levels): a request
// names a level, 1 the highest. A worker queues each level apart and never
// starts a lower level's forward while a higher level's request waits; a
// batch holds one level, and while a higher level has traffic a lower one
// runs a request per forward (what the higher level waits behind is short).
// Each level has its own queue limit, timeout and action past it (refuse,
// or keep waiting behind the requests still in time). Under overload the
// lowest level is refused first: a full queue takes a request by refusing
// the newest of a lower level queued, never one of its own or a higher one.
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
#include <string>
#include <vector>

#include "features/extract.h"
#include "numaserve/common/result.h"
#include "numaserve/common/turn.h"

namespace numaserve::batching {

using Clock = std::chrono::steady_clock;

// What happens to a request of a level that waited longer than its timeout.
enum class TimeoutAction {
  kReject,  // refused (503 / RESOURCE_EXHAUSTED), not run
  kDelay,   // kept: it runs after the requests of its level still within theirs
};

struct LevelPolicy {
  std::size_t max_queue_size = 0;        // per worker; 0: up to queue_capacity
  std::chrono::microseconds timeout{0};  // 0: max_queue_delay; the most a request may ask for
  TimeoutAction timeout_action = TimeoutAction::kReject;
  bool allow_timeout_override = false;   // a request may ask for less than `timeout`
};

struct BatcherConfig {
  std::size_t workers = 1;
  std::size_t queue_capacity = 64;                       // per worker: requests waiting for a forward
  std::chrono::microseconds max_queue_delay{1'000'000};  // older requests are refused, not run
  std::size_t max_batch_items = 1024;                    // rows per forward; a larger request runs alone
  std::chrono::microseconds max_batch_delay{0};          // wait this long after the first request for more
  std::size_t priority_levels = 1;    // 1 is the highest
  std::vector<LevelPolicy> policies;  // [p - 1]: level p's, where given; the rest take LevelPolicy's defaults
  std::size_t default_priority = 0;   // a request's that names none; 0: the lowest
  // How long after a higher level's request a lower level still runs one
  // request per forward (not an option: the batcher's own tuning).
  std::chrono::milliseconds higher_level_active{100};

  const LevelPolicy& policy(std::size_t priority) const;
  std::size_t default_level() const { return default_priority == 0 ? priority_levels : default_priority; }
  // Level `priority`'s timeout: its own, else max_queue_delay.
  std::chrono::microseconds timeout(std::size_t priority) const;
  // A configuration that contradicts itself, naming the option.
  Status check() const;
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
  std::size_t priority = 1;              // its level: 1..priority_levels()
  std::chrono::microseconds timeout{0};  // its own queue timeout (an override); 0: its level's
};

struct WorkerStats {
  std::uint64_t forwards = 0;
  std::uint64_t rows = 0;
  std::uint64_t requests = 0;  // run in its forwards, its own and others'
  std::uint64_t stolen = 0;    // of those, queued by another worker
  double forward_seconds = 0;
  std::size_t queued = 0;  // now
};

// One priority level, over all workers.
struct LevelStats {
  std::size_t queued = 0;      // now
  std::uint64_t answered = 0;  // run in a forward, failed or not
  std::uint64_t refused = 0;   // for load: admission, its timeout, or taken over by a higher level
  double wait_seconds = 0;     // the answered ones' time in the queue
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
  // With levels, for a request of `priority`: the queue is full only when
  // nothing of a lower level is queued for it to take over; the age and
  // the rows ahead are its level's and the levels above. Refusals are
  // kResourceExhausted, counted for `priority` when `count`.
  Status admit(std::size_t worker, std::size_t priority = 1, Clock::time_point deadline = Clock::time_point::max(),
               bool count = true) const;
  // On `worker`'s thread, after admit().
  void submit(std::size_t worker, Job job);
  // On `worker`'s thread, once per turn of its loop: refuses what aged out
  // and runs one batch of its own queue, or of another worker's.
  Turn run_turn(std::size_t worker);
  // On `worker`'s thread: a request above the lowest level was queued since
  // its last turn, so its loop should stop reading and run it now. Under a
  // flood the loop would otherwise read, parse and refuse every lower-level
  // request that arrives before it ends its intake, while the higher one
  // waits. Never with one level or with max_batch_delay (a batch waits on
  // purpose there).
  bool turn_due(std::size_t worker) const;

  std::size_t queue_depth() const;  // over all workers
  std::size_t busy_workers() const;
  std::vector<WorkerStats> stats() const;
  std::vector<LevelStats> level_stats() const;  // [0] is priority 1
  const BatcherConfig& config() const { return config_; }

 private:
  struct Queued {
    Job job;
    Clock::time_point submitted;
    Clock::time_point expires;  // submitted + its timeout
    bool displaced = false;     // refused for a higher level's request (take_over)
  };
  struct Worker;
  struct LevelCounters;

  // Refuses `q` for load: its `why`, counted for its level.
  void refuse(Queued& q, const std::string& why) const;
  void expire(Worker& w, Clock::time_point now, std::vector<Queued>& aged) const;
  // Makes room for a job of `priority` in a full queue: the newest of the
  // lowest level below it goes to `w`'s taken-over list.
  void take_over(Worker& w, std::size_t priority);
  void take(Worker& w, std::size_t most, Clock::time_point now, std::vector<Queued>& out) const;
  void collect(std::size_t worker, Clock::time_point now, std::vector<Queued>& jobs, std::vector<Queued>& aged, Turn& turn);
  void share(std::size_t worker, std::vector<Queued>& jobs, Turn& turn);
  bool steal(std::size_t thief, Clock::time_point now, std::vector<Queued>& jobs, std::vector<Queued>& aged);
  void run(Worker& w, std::vector<Queued>& jobs, bool stolen);

  const BatcherConfig config_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<LevelCounters[]> levels_;
};

}  // namespace numaserve::batching
