#include "api/service.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "codec/errors.h"
#include "http/grpc_wire.h"
#include "numaserve/common/duration.h"

namespace numaserve::api {
namespace {

using Clock = batching::Clock;

// Each name once, in the order of its first version.
std::vector<std::string> model_names(const std::vector<std::unique_ptr<Model>>& models) {
  std::vector<std::string> names;
  for (const auto& m : models) {
    if (std::find(names.begin(), names.end(), m->spec().name) == names.end()) names.push_back(m->spec().name);
  }
  return names;
}

batching::BatcherConfig batching_of(const ServiceConfig& config, const PlacementReport& placement) {
  auto batching = config.batching;
  batching.workers = placement.plan.workers.size();
  return batching;
}

}  // namespace

Result<std::unique_ptr<Service>> Service::create(Parts parts) {
  auto models = std::move(parts.models);
  std::unique_ptr<Service> service(new Service(std::move(parts), model_names(models)));
  // Start-up refuses two models of one name (--model-dir) and versions of
  // one name whose feature contracts differ (the repository's manager); a
  // refusal here is a caller's bug, reported as an error, not thrown.
  for (auto& m : models) {
    if (auto added = service->models_.add(std::move(m)); !added) return tl::unexpected(added.error());
  }
  return service;
}

Service::Service(Parts parts, std::vector<std::string> model_names)
    : config_(std::move(parts.config)),
      placement_(std::move(parts.placement)),
      models_(std::move(model_names)),
      store_(std::move(parts.store)),
      prepare_worker_thread_(std::move(parts.prepare_worker_thread)),
      transport_gauges_(std::move(parts.transport_gauges)),
      wake_worker_(std::move(parts.wake_worker)),
      request_id_prefix_("ns-" + std::to_string(getpid()) + "-"),
      metrics_(models_.names(), config_.batching.priority_levels),
      batcher_(batching_of(config_, placement_)),
      readiness_(placement_.plan.workers.size(), config_.wait_for_group),
      warmup_left_(placement_.plan.workers.size(), 0),
      warm_queues_(placement_.plan.workers.size()) {}

Status Service::add_model(const features::ModelSpec& spec) {
  const auto names = models_.names();
  if (std::find(names.begin(), names.end(), spec.name) != names.end()) return {};
  // Store and metrics first: once the table has the name, a request can
  // reach them with its number.
  if (auto added = store_->add_model(names.size(), spec); !added) return added;
  metrics_.add_model(spec.name);
  models_.add_name(spec.name);
  return {};
}

void Service::start_worker(std::size_t worker) {
  // Pin first: the runtime's thread pool the first forward creates inherits
  // the worker's CPUs, and the buffers it touches land on the worker's node.
  auto bound = numa::bind_current_thread(placement_.plan.workers[worker].cpus);
  if (prepare_worker_thread_) prepare_worker_thread_(placement_.plan.intra_op_threads);
  store_->start_worker(worker);
  warmup_left_[worker] = bound ? models_.all().size() * config_.warmup_rounds : 0;
  if (!bound) {
    readiness_.worker_warm(bound.error());
  } else if (warmup_left_[worker] == 0) {
    readiness_.worker_warm(std::nullopt);
  }
}

// One warm-up forward per turn, so the worker's loop answers /healthz (and
// refuses /predict with 503) between them instead of going silent.
void Service::warm_up_step(std::size_t worker) {
  auto& left = warmup_left_[worker];
  const auto versions = models_.all();
  const std::size_t index = (left - 1) / config_.warmup_rounds;
  if (index >= versions.size()) {  // a version unloaded meanwhile
    --left;
    if (left == 0) readiness_.worker_warm(std::nullopt);
    return;
  }
  if (auto warm = versions[index]->model->warm_up(config_.warmup_rows, 1); !warm) {
    left = 0;
    readiness_.worker_warm(warm.error());
    return;
  }
  if (--left == 0) readiness_.worker_warm(std::nullopt);
}

Turn Service::turn(std::size_t worker) {
  if (warmup_left_[worker] > 0) {
    warm_up_step(worker);
    return Turn{true, std::nullopt, {}};
  }
  Turn turn = batcher_.run_turn(worker);
  const bool warming = warm_queues_[worker].pending.load(std::memory_order_acquire) && warm_step(worker);
  turn.more_work = turn.more_work || warming;
  return turn;
}

struct Service::Warming {
  lifecycle::HeldVersion version;
  std::function<void(Status)> done;
  std::atomic<std::size_t> workers_left;
  std::mutex mutex;
  std::optional<Error> failure;
};

lifecycle::ServiceHooks Service::lifecycle_hooks() {
  return {&models_, &metrics_, [this](const features::ModelSpec& spec) { return add_model(spec); },
          [this](lifecycle::HeldVersion version, std::function<void(Status)> done) {
            warm(std::move(version), std::move(done));
          }};
}

void Service::warm(lifecycle::HeldVersion version, std::function<void(Status)> done) {
  const std::size_t workers = warm_queues_.size();
  if (workers == 0 || config_.warmup_rounds == 0) return done({});
  auto warming = std::make_shared<Warming>();
  warming->version = std::move(version);
  warming->done = std::move(done);
  warming->workers_left = workers;
  for (std::size_t w = 0; w < workers; ++w) {
    {
      std::lock_guard lock(warm_queues_[w].mutex);
      warm_queues_[w].tasks.emplace_back(warming, config_.warmup_rounds);
      warm_queues_[w].pending.store(true, std::memory_order_release);
    }
    if (wake_worker_) wake_worker_(w);
  }
}

// One warm-up forward of the worker's oldest task; whether more are left.
bool Service::warm_step(std::size_t worker) {
  auto& queue = warm_queues_[worker];
  std::shared_ptr<Warming> task;
  {
    std::lock_guard lock(queue.mutex);
    if (queue.tasks.empty()) return false;
    task = queue.tasks.front().first;
  }
  auto warmed = task->version->model->warm_up(config_.warmup_rows, 1);
  bool finished = false;
  {
    std::lock_guard lock(queue.mutex);
    auto& rounds = queue.tasks.front().second;
    if (!warmed || --rounds == 0) {
      queue.tasks.pop_front();
      finished = true;
    }
    queue.pending.store(!queue.tasks.empty(), std::memory_order_release);
  }
  if (!warmed) {
    std::lock_guard lock(task->mutex);
    if (!task->failure) task->failure = warmed.error();
  }
  if (finished && task->workers_left.fetch_sub(1) == 1) {
    std::optional<Error> failure;
    {
      std::lock_guard lock(task->mutex);
      failure = task->failure;
    }
    task->done(failure ? Status(tl::unexpected(*failure)) : Status{});
  }
  return queue.pending.load(std::memory_order_acquire);
}

Status Service::ready() const {
  if (!readiness_.ready()) return make_error(Error::Code::kUnavailable, "not ready: " + readiness_.reason());
  if (const auto missing = models_.missing(); !missing.empty()) {
    std::string names;
    for (const auto& name : missing) names += (names.empty() ? "" : ", ") + name;
    return make_error(Error::Code::kUnavailable, "not ready: no version of " + names + " serves", "model");
  }
  return {};
}

Status Service::admit(const Call& call) {
  if (!readiness_.warm()) return make_error(Error::Code::kUnavailable, "not ready: warming up");
  if (config_.batching.priority_levels == 1) return batcher_.admit(call.worker, 1, call.request.deadline);
  if (call.request.deadline <= Clock::now()) {
    return make_error(Error::Code::kDeadlineExceeded, "deadline exceeded before the request was queued");
  }
  return {};
}

Status Service::schedule(Call& call, const codec::Scheduling& scheduling, const features::ModelSpec& model) {
  const auto& levels = config_.batching;
  call.priority = model.priority != 0 ? std::min(model.priority, levels.priority_levels) : levels.default_level();
  if (scheduling.priority) {
    const auto p = *scheduling.priority;
    if (p < 1 || p > static_cast<std::int64_t>(levels.priority_levels)) {
      const std::string field(scheduling.priority_field);
      return make_error(Error::Code::kInvalidArgument,
                        field + ": want a priority level from 1 (the highest) to " +
                            std::to_string(levels.priority_levels) + ", got " + std::to_string(p),
                        field);
    }
    call.priority = static_cast<std::size_t>(p);
  }
  if (scheduling.timeout_us) {
    const auto us = *scheduling.timeout_us;
    const auto ceiling = levels.timeout(call.priority);
    if (us < 0 || us > ceiling.count()) {
      const std::string field(scheduling.timeout_field);
      return make_error(Error::Code::kInvalidArgument,
                        field + ": want a timeout in microseconds from 0 to priority level " +
                            std::to_string(call.priority) + "'s " + std::to_string(ceiling.count()) + ", got " +
                            std::to_string(us),
                        field);
    }
    if (levels.policy(call.priority).allow_timeout_override) call.timeout = std::chrono::microseconds(us);
  }
  if (levels.priority_levels == 1) return {};  // admitted before the parse
  return batcher_.admit(call.worker, call.priority, call.request.deadline);
}

std::string Service::request_id(std::string given) {
  return !given.empty() ? std::move(given) : request_id_prefix_ + std::to_string(next_request_id_++);
}

// What a queued request's completion needs; shared, because the batcher's
// callbacks are copyable and the responder is not.
struct Service::Pending {
  http::Responder responder;
  std::string_view route;
  http::Protocol protocol;
  lifecycle::HeldVersion version;  // from admission to the reply
  Clock::time_point start;
  Encoder encode;
  std::size_t priority;  // its level, for its latency
};

void Service::enqueue(Call& call, lifecycle::HeldVersion version, features::Batch batch, Clock::time_point start, Encoder encode) {
  // The job holds its version too: a version is freed only once no queued
  // batch can run on it.
  std::shared_ptr<const batching::Forward> forward = version;
  auto pending = std::make_shared<Pending>(
      Pending{std::move(call.responder), call.route, call.request.protocol, std::move(version), start, std::move(encode),
              call.priority});
  batcher_.submit(call.worker, batching::Job{std::move(forward), std::move(batch), call.request.deadline,
                                             [this, pending](batching::Outcome&& outcome) { complete(*pending, std::move(outcome)); },
                                             call.priority, call.timeout});
}

// On the worker that ran the forward (or refused the request for its age).
void Service::complete(Pending& pending, batching::Outcome&& outcome) {
  if (outcome.timing.first_of_batch) metrics_.observe_batch(outcome.timing.batch_items, outcome.timing.batch_requests);
  if (!outcome.scores) {  // 503: aged out in the queue; 504: past the caller's deadline; 500: the forward failed
    finish(pending.route, pending.responder, codec::error_reply(outcome.scores.error(), pending.protocol));
    return;
  }
  const std::string& name = pending.version->name;
  metrics_.count_version(name, pending.version->version);
  metrics_.observe(metrics::Stage::kQueue, name, outcome.timing.queue_seconds);
  metrics_.observe(metrics::Stage::kForward, name, outcome.timing.forward_seconds);
  const auto encoding = Clock::now();
  http::Reply reply = pending.encode(std::move(*outcome.scores));
  metrics_.observe(metrics::Stage::kEncode, name, to_seconds(Clock::now() - encoding));
  const double total = to_seconds(Clock::now() - pending.start);
  metrics_.observe(metrics::Stage::kTotal, name, total);
  metrics_.observe_level(pending.priority, total);
  finish(pending.route, pending.responder, std::move(reply));
}

void Service::finish(std::string_view route, http::Responder& responder, http::Reply reply) {
  if (reply.grpc_status) {
    metrics_.count_grpc_call(std::string(route), http::grpc::code_name(*reply.grpc_status));
  } else {
    metrics_.count_request(std::string(route), reply.status);
  }
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  responder.send(std::move(reply));
}

std::string Service::startup_summary() const {
  const auto& plan = placement_.plan;
  std::string models;
  const auto locality = model_locality();
  for (const auto& v : models_.all()) {
    char share[32] = "n/a";
    if (auto it = locality.find(v->name + "@" + v->version); it != locality.end()) std::snprintf(share, sizeof share, "%.1f%%", 100 * it->second);
    // Where its linear layers run: "avx512:5/5" (numaserve's kernels), "libtorch:0/5".
    const auto linear = v->model->graph_report().linear;
    models += (models.empty() ? "" : ",") + v->name + "@" + v->version + "(" +
              std::to_string(v->model->weight_bytes() >> 20) + "MiB local=" + share +
              " linear=" + (linear.own > 0 ? linear.kernels : "libtorch") + ":" + std::to_string(linear.own) + "/" +
              std::to_string(linear.own + linear.libtorch) + ")";
  }
  return "cpus=" + plan.cpus.to_list() + " mems=" + plan.mems.to_list() + " numa_nodes=" + plan.numa_nodes.to_list() +
         " workers=" + std::to_string(plan.workers.size()) + " intra_op_threads=" + std::to_string(plan.intra_op_threads) +
         " membind=" + (placement_.memory_policy.applied ? "yes" : "no") + " runtime=\"" + placement_.runtime +
         "\" models=" + models;
}

}  // namespace numaserve::api
