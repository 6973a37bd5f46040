// POST /predict, the whole way on the worker whose loop read it:
//   admit   a worker whose queue is full or stale refuses before parsing (503)
//   parse   the body into a request (http/predict_json.cpp; a bad body is a 400)
//   query   what the feature store holds for the user and the items
//   extract the model's input rows (features/)
//   batch   queued for this worker's next forward, joined with what arrived
//           together (batching/); an idle worker may take it
//   forward the model (model/), on the worker that took the batch
//   encode  the reply, written by the loop that owns the connection
#include <algorithm>

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

// A /predict waiting for a networked store.
struct Service::Flight {
  Call call;
  Predicting p;
  std::vector<std::int64_t> cached;  // per item: its row in the worker's cache, or -1
  std::uint64_t generation;          // the cache's when the rows were found
  bool asked_again;                  // the cache was emptied while the first query was out
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
    fetch(std::make_shared<Flight>(Flight{std::move(call), std::move(p), {}, 0, false}));
    return std::nullopt;
  }
  auto* cache = item_caches_[*index] ? &*item_caches_[*index] : nullptr;
  const auto stored = features::query(p.parsed.features, *store_, cache);
  return extract_and_enqueue(call, p, stored, cache, false);
}

features::ItemCache* Service::fetched_items(std::size_t worker, std::size_t model) {
  return fetched_items_.empty() ? nullptr : &fetched_items_[worker][model];
}

// The query goes out on this worker's loop, which serves its other
// connections until the answer (or the deadline) comes back.
void Service::fetch(const std::shared_ptr<Flight>& flight) {
  Flight& f = *flight;
  const features::Request& request = f.p.parsed.features;
  std::size_t hits = 0;
  if (auto* cache = fetched_items(f.call.worker, f.p.model); cache && !f.asked_again) {
    f.cached.assign(request.items.size(), -1);
    cache->find_rows(request, f.cached, Clock::now());
    f.generation = cache->generation();
    hits = static_cast<std::size_t>(std::count_if(f.cached.begin(), f.cached.end(), [](auto r) { return r >= 0; }));
  }
  cache_hits_.fetch_add(hits, std::memory_order_relaxed);
  cache_misses_.fetch_add(request.items.size() - hits, std::memory_order_relaxed);
  remote_->fetch(f.call.worker, request, f.cached,
                 [this, flight](Result<features::Fetched>&& got) { fetched(flight, std::move(got)); });
}

void Service::fetched(const std::shared_ptr<Flight>& flight, Result<features::Fetched>&& got) {
  Flight& f = *flight;
  features::ItemCache* cache = fetched_items(f.call.worker, f.p.model);
  if (cache && got && cache->generation() != f.generation && !f.asked_again) {
    // The cache was emptied (full) while this request waited: the rows it
    // found are gone, so its items are asked for too, once.
    f.asked_again = true;
    f.cached.clear();
    fetch(flight);
    return;
  }
  metrics_.observe_feature_store(seconds(Clock::now() - f.p.query_start));
  respond(f.call, [&]() -> Answer {
    if (!got) return tl::unexpected(got.error());
    auto stored = got->stored();
    stored.cached_rows = std::move(f.cached);
    // What the store failed to give is defaults, not worth keeping.
    return extract_and_enqueue(f.call, f.p, stored, cache, !got->degraded);
  });
}

Answer Service::extract_and_enqueue(Call& call, Predicting& p, const features::StoredFeatures& stored,
                                    features::ItemCache* cache, bool remember) {
  const model::Model& m = *models_[p.model];
  const std::string& name = m.spec().name;
  const auto extract_start = Clock::now();
  metrics_.observe(metrics::Stage::kQuery, name, seconds(extract_start - p.query_start));
  auto batch = features::extract(m.spec(), p.parsed.features, stored, cache);
  if (!batch) return tl::unexpected(batch.error());
  if (remember && cache != nullptr) {
    // The rows fetched for this request, for the next ones on this worker.
    const auto expires = extract_start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(config_.item_cache_ttl_seconds));
    const auto& items = p.parsed.features.items;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const bool fetched = stored.cached_rows.empty() || stored.cached_rows[i] < 0;
      if (fetched && items[i].features.empty()) cache->put(items[i].id, *batch, i, expires);
    }
  }
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
