// POST /predict, the whole way on the worker whose loop read it:
//   admit   a worker whose queue is full or stale refuses before parsing (503)
//   parse   the body into a request (http/predict_json.cpp; a bad body is a 400)
//   query   what the feature store holds for the user and the items
//   extract the model's input rows (features/)
//   batch   queued for this worker's next forward, joined with what arrived
//           together (batching/); an idle worker may take it
//   forward the model (model/), on the worker that took the batch
//   encode  the reply, written by the loop that owns the connection
#include "api/service.h"
#include "http/predict_json.h"

namespace numaserve::api {
namespace {

using Clock = batching::Clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Answer Service::predict(Call& call) {
  const auto start = Clock::now();
  if (auto admitted = batcher_.admit(call.worker); !admitted) return tl::unexpected(admitted.error());
  auto parsed = http::parse_predict_request(call.request.body, config_.limits);
  if (!parsed) return tl::unexpected(parsed.error());
  if (!warm_) return make_error(Error::Code::kUnavailable, "not ready: warming up");
  const auto index = find_model(parsed->model);
  if (!index) return tl::unexpected(index.error());
  const model::Model& m = *models_[*index];
  const std::string& name = m.spec().name;
  auto stage_start = Clock::now();
  metrics_.observe(metrics::Stage::kParse, name, seconds(stage_start - start));

  const features::ItemCache* cache = item_caches_[*index] ? &*item_caches_[*index] : nullptr;
  const auto stored = features::query(parsed->features, *store_, cache);
  auto now = Clock::now();
  metrics_.observe(metrics::Stage::kQuery, name, seconds(now - stage_start));
  stage_start = now;
  auto batch = features::extract(m.spec(), parsed->features, stored, cache);
  if (!batch) return tl::unexpected(batch.error());
  metrics_.observe(metrics::Stage::kExtract, name, seconds(Clock::now() - stage_start));

  std::string request_id = !parsed->request_id.empty() ? std::move(parsed->request_id)
                                                        : request_id_prefix_ + std::to_string(next_request_id_++);
  enqueue(call, *index, std::move(*batch), start, [&m, id = std::move(request_id)](std::vector<float>&& scores) {
    http::Reply reply;
    reply.body = http::to_json(http::PredictResponse{m.spec().name, m.spec().version, id, std::move(scores)});
    return reply;
  });
  return std::nullopt;
}

}  // namespace numaserve::api
