#include "api/service.h"

#include <unistd.h>

#include <cstdio>

#include "api/errors.h"

namespace numaserve::api {
namespace {

using Clock = batching::Clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

Service::Service(ServiceConfig config, PlacementReport placement, std::vector<std::unique_ptr<model::Model>> models,
                 std::unique_ptr<features::FeatureStore> store, const http::Server& transport,
                 std::unique_ptr<features::RemoteStore> remote)
    : config_(std::move(config)),
      placement_(std::move(placement)),
      models_(std::move(models)),
      store_(std::move(store)),
      remote_(std::move(remote)),
      transport_(transport),
      request_id_prefix_("ns-" + std::to_string(getpid()) + "-"),
      metrics_([this] {
        std::vector<std::string> names;
        for (const auto& m : models_) names.push_back(m->spec().name);
        return names;
      }()),
      batcher_(
          [this] {
            auto batching = config_.batching;
            batching.workers = placement_.plan.workers.size();
            return batching;
          }(),
          [this](std::size_t model, const features::Batch& batch, std::size_t requests) {
            metrics_.observe_batch(batch.rows, requests);
            return models_[model]->forward(batch);
          }),
      workers_(placement_.plan.workers.size()) {
  for (const auto& m : models_) {
    auto cache = features::ItemCache::build(m->spec(), *store_);
    if (!cache) {
      // A store value the model cannot read ("model ranker_a: feature store
      // item 'i7' price: want a number"): refuse to turn ready.
      warm_error_ = cache.error();
      item_caches_.emplace_back();
      continue;
    }
    item_caches_.emplace_back(std::move(*cache));
  }
  if (remote_ && config_.item_cache_ttl_seconds > 0) {
    fetched_items_.resize(workers_.size());
    for (auto& per_model : fetched_items_) {
      for (const auto& m : models_) per_model.push_back(features::ItemCache::empty(m->spec(), config_.item_cache_rows));
    }
  }
}

Service::~Service() = default;

void Service::on_loop_start(std::size_t worker) {
  // Pin first: the OpenMP team the first forward creates inherits the
  // worker's CPUs, and the buffers it touches land on the worker's node.
  auto bound = numa::bind_current_thread(placement_.plan.workers[worker].cpus);
  model::set_intra_op_threads(placement_.plan.intra_op_threads);
  if (remote_) remote_->start_worker(worker);  // connects now; readiness does not wait for it
  workers_[worker].warmup_forwards_left = bound ? models_.size() * config_.warmup_rounds : 0;
  if (!bound) {
    worker_warm(bound.error());
  } else if (workers_[worker].warmup_forwards_left == 0) {
    worker_warm(std::nullopt);
  }
}

// One warm-up forward per turn, so the worker's loop answers /healthz (and
// refuses /predict with 503) between them instead of going silent.
void Service::warm_up_step(std::size_t worker) {
  auto& left = workers_[worker].warmup_forwards_left;
  const std::size_t model = (left - 1) / config_.warmup_rounds;
  if (auto warm = models_[model]->warm_up(config_.warmup_rows, 1); !warm) {
    left = 0;
    worker_warm(warm.error());
    return;
  }
  if (--left == 0) worker_warm(std::nullopt);
}

void Service::worker_warm(std::optional<Error> failure) {
  std::lock_guard lock(warm_mutex_);
  if (failure && !warm_error_) warm_error_ = std::move(failure);
  ++warm_workers_;
  warm_cv_.notify_all();
}

http::Turn Service::on_turn(std::size_t worker) {
  if (workers_[worker].warmup_forwards_left > 0) {
    warm_up_step(worker);
    return http::Turn{true, std::nullopt, {}};
  }
  auto turn = batcher_.run_turn(worker);
  return http::Turn{turn.more_work, turn.wake_at, std::move(turn.wake)};
}

Status Service::wait_until_warm() {
  std::unique_lock lock(warm_mutex_);
  warm_cv_.wait(lock, [this] { return warm_workers_ == workers_.size(); });
  if (warm_error_) return tl::unexpected(*warm_error_);
  warm_ = true;
  update_ready();
  return {};
}

void Service::open_group() {
  group_open_ = true;
  update_ready();
}

void Service::begin_drain() {
  draining_ = true;
  update_ready();
}

void Service::update_ready() { ready_ = warm_ && (group_open_ || !config_.wait_for_group) && !draining_; }

std::string Service::not_ready_reason() const {
  return draining_ ? "draining" : !warm_ ? "warming up" : "waiting for the other workers";
}

Result<std::size_t> Service::find_model(const std::optional<std::string>& name, const std::string& version) const {
  std::size_t index = 0;  // the first model is the default
  if (name) {
    while (index < models_.size() && models_[index]->spec().name != *name) ++index;
    if (index == models_.size()) return make_error(Error::Code::kNotFound, "model '" + *name + "' is not served here", "model");
  }
  const auto& spec = models_[index]->spec();
  if (!version.empty() && version != spec.version) {
    return make_error(Error::Code::kNotFound,
                      "model " + spec.name + " has version " + spec.version + ", not " + version, "version");
  }
  return index;
}

// What a queued request's completion needs; shared, because the batcher's
// callbacks are copyable and the responder is not.
struct Service::Pending {
  http::Responder responder;
  std::string_view route;
  std::size_t model;
  Clock::time_point start;
  Encoder encode;
};

void Service::enqueue(Call& call, std::size_t model, features::Batch batch, Clock::time_point start, Encoder encode) {
  auto pending = std::make_shared<Pending>(Pending{std::move(call.responder), call.route, model, start, std::move(encode)});
  batcher_.submit(call.worker, batching::Job{model, std::move(batch), [this, pending](batching::Outcome&& outcome) {
                                               complete(*pending, std::move(outcome));
                                             }});
}

// On the worker that ran the forward (or refused the request for its age).
void Service::complete(Pending& pending, batching::Outcome&& outcome) {
  if (!outcome.scores) {  // 503: aged out in the queue; 500: the forward failed
    finish(pending.route, pending.responder, error_reply(outcome.scores.error()));
    return;
  }
  const std::string& name = models_[pending.model]->spec().name;
  metrics_.observe(metrics::Stage::kQueue, name, outcome.timing.queue_seconds);
  metrics_.observe(metrics::Stage::kForward, name, outcome.timing.forward_seconds);
  const auto encoding = Clock::now();
  http::Reply reply = pending.encode(std::move(*outcome.scores));
  metrics_.observe(metrics::Stage::kEncode, name, since(encoding));
  metrics_.observe(metrics::Stage::kTotal, name, since(pending.start));
  finish(pending.route, pending.responder, std::move(reply));
}

void Service::finish(std::string_view route, http::Responder& responder, http::Reply reply) {
  metrics_.count_request(std::string(route), reply.status);
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  responder.send(std::move(reply));
}

std::string Service::startup_summary() const {
  const auto& plan = placement_.plan;
  std::string models;
  const auto locality = model_locality();
  for (const auto& m : models_) {
    char share[32] = "n/a";
    if (auto it = locality.find(m->spec().name); it != locality.end()) std::snprintf(share, sizeof share, "%.1f%%", 100 * it->second);
    models += (models.empty() ? "" : ",") + m->spec().name + "@" + m->spec().version + "(" +
              std::to_string(m->weight_bytes() >> 20) + "MiB local=" + share + ")";
  }
  return "cpus=" + plan.cpus.to_list() + " mems=" + plan.mems.to_list() + " numa_nodes=" + plan.numa_nodes.to_list() +
         " workers=" + std::to_string(plan.workers.size()) + " intra_op_threads=" + std::to_string(plan.intra_op_threads) +
         " membind=" + (placement_.memory_policy.applied ? "yes" : "no") + " runtime=\"" + placement_.runtime +
         "\" models=" + models;
}

}  // namespace numaserve::api
