// POST /predict, the whole way on the worker whose loop read it:
//   admit   a worker whose queue is full or stale refuses before parsing (503)
//   parse   the body into a request (http/predict_json.cpp; a bad body is a 400)
//   query   what the feature store holds for the user and the items
//   extract the model's input rows (features/)
//   batch   queued for this worker's next forward, joined with what arrived
//           together (batching/); an idle worker may take it
//   forward the model (model/), on the worker that took the batch
//   encode  the reply, written by the loop that owns the connection
#include "api/errors.h"
#include "api/service.h"
#include "http/predict_json.h"

namespace numaserve::api {
namespace {

using Clock = batching::Clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// What a /predict carries from its parse to its queue.
struct Service::Predicting {
  http::PredictRequest parsed;
  std::size_t model = 0;
  Clock::time_point start, query_start;
};

Answer Service::predict(Call& call) {
  const auto start = Clock::now();
  if (auto admitted = batcher_.admit(call.worker); !admitted) return tl::unexpected(admitted.error());
  auto parsed = http::parse_predict_request(call.request.body, config_.limits);
  if (!parsed) return tl::unexpected(parsed.error());
  if (!warm_) return make_error(Error::Code::kUnavailable, "not ready: warming up");
  const auto index = find_model(parsed->model);
  if (!index) return tl::unexpected(index.error());
  const auto query_start = Clock::now();
  metrics_.observe(metrics::Stage::kParse, models_[*index]->spec().name, seconds(query_start - start));
  Predicting p{std::move(*parsed), *index, start, query_start};

  if (remote_) {
    // The query goes out on this worker's loop, which serves its other
    // connections until the answer (or the deadline) comes back.
    auto flight = std::make_shared<std::pair<Call, Predicting>>(std::move(call), std::move(p));
    remote_->fetch(flight->first.worker, flight->second.parsed.features, [this, flight](Result<features::Fetched>&& got) {
      fetched(flight->first, flight->second, std::move(got));
    });
    return std::nullopt;
  }
  const features::ItemCache* cache = item_caches_[*index] ? &*item_caches_[*index] : nullptr;
  const auto stored = features::query(p.parsed.features, *store_, cache);
  return extract_and_enqueue(call, p, stored, cache);
}

void Service::fetched(Call& call, Predicting& p, Result<features::Fetched>&& got) {
  metrics_.observe_feature_store(seconds(Clock::now() - p.query_start));
  Answer answer = [&]() -> Answer {
    if (!got) return tl::unexpected(got.error());
    try {
      return extract_and_enqueue(call, p, got->stored(), nullptr);
    } catch (const std::exception& e) {
      return make_error(Error::Code::kInternal, std::string("internal error: ") + e.what());
    }
  }();
  if (answer && !*answer) return;  // queued
  finish(call.route, call.responder, answer ? std::move(**answer) : error_reply(answer.error()));
}

Answer Service::extract_and_enqueue(Call& call, Predicting& p, const features::StoredFeatures& stored,
                                    const features::ItemCache* cache) {
  const model::Model& m = *models_[p.model];
  const std::string& name = m.spec().name;
  const auto extract_start = Clock::now();
  metrics_.observe(metrics::Stage::kQuery, name, seconds(extract_start - p.query_start));
  auto batch = features::extract(m.spec(), p.parsed.features, stored, cache);
  if (!batch) return tl::unexpected(batch.error());
  metrics_.observe(metrics::Stage::kExtract, name, seconds(Clock::now() - extract_start));

  std::string request_id = !p.parsed.request_id.empty() ? std::move(p.parsed.request_id)
                                                         : request_id_prefix_ + std::to_string(next_request_id_++);
  enqueue(call, p.model, std::move(*batch), p.start, [&m, id = std::move(request_id)](std::vector<float>&& scores) {
    http::Reply reply;
    reply.body = http::to_json(http::PredictResponse{m.spec().name, m.spec().version, id, std::move(scores)});
    return reply;
  });
  return std::nullopt;
}

}  // namespace numaserve::api
