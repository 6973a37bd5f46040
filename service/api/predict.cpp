// POST /predict, the whole way on the worker whose loop read it, in this
// order and in this file:
//   admit    a service warming up, or a worker whose queue is full or
//            stale, refuses before parsing (503)
//   parse    the body into a request (predict_json.cpp; a bad body is a 400)
//   resolve  the model and version it names, or the default (404 for an
//            unknown or not-ready one), held until the reply is sent
//   schedule its priority level (its own, else its model's, else the
//            server's default) and timeout; with levels, the admission at
//            its level (503)
//   fetch    what the feature store holds for the user and the items
//            (feature_store/): the embedded store answers at once, Redis
//            on this worker's loop, which serves its other connections
//            meanwhile
//   extract  the model's input rows (features/)
//   enqueue  for this worker's next forward, joined with what arrived
//            together (batching/); an idle worker may take it
//   forward  the model (model/), on the worker that took the batch
//   encode   the reply, written by the loop that owns the connection
// The same way for /predict's JSON and the Ranking.Predict gRPC call's
// protobuf: only the codec differs.
#include "api/handlers.h"
#include "codec/predict_json.h"
#include "numaserve/common/duration.h"

namespace numaserve::api {
namespace {

using Clock = batching::Clock;

// One /predict from its parse to its queue; shared with the store's
// completion, which may come later, on the same worker.
struct Prediction {
  Call call;
  const PredictCodec* codec;
  codec::PredictRequest request;
  lifecycle::HeldVersion version;
  Clock::time_point start, fetch_start;
};

Answer extract_and_enqueue(Service& service, Prediction& p, Result<feature_store::Found>&& found) {
  if (!found) return tl::unexpected(found.error());
  const Model& model = *p.version->model;
  const std::string& name = p.version->name;
  const auto extract_start = Clock::now();
  service.metrics().observe(metrics::Stage::kQuery, name, to_seconds(extract_start - p.fetch_start));
  auto batch = features::extract(model.spec(), p.request.features, found->stored, found->cache);
  if (!batch) return tl::unexpected(batch.error());
  service.store().keep(p.call.worker, p.version->model_index, p.request.features, *found, *batch);
  service.metrics().observe(metrics::Stage::kExtract, name, to_seconds(Clock::now() - extract_start));

  auto encode = [codec = p.codec, version = p.version.get(),
                 id = service.request_id(std::move(p.request.request_id))](std::vector<float>&& scores) {
    return codec->encode(codec::PredictResponse{version->name, version->version, id, std::move(scores)});
  };
  service.enqueue(p.call, p.version, std::move(*batch), p.start, std::move(encode));
  return std::nullopt;
}

const PredictCodec kJsonCodec{&codec::parse_predict_request, [](codec::PredictResponse&& response) {
                                 http::Reply reply;
                                 reply.body = codec::to_json(response);
                                 return reply;
                               }};

}  // namespace

Answer predict(Service& service, Call& call) { return predict_with(service, call, kJsonCodec); }

Answer predict_with(Service& service, Call& call, const PredictCodec& codec) {
  const auto start = Clock::now();
  if (auto admitted = service.admit(call); !admitted) return tl::unexpected(admitted.error());
  auto parsed = codec.parse(call.request.body, service.config().limits);
  if (!parsed) return tl::unexpected(parsed.error());
  auto version = service.find_model(parsed->model, parsed->version);
  if (!version) return tl::unexpected(version.error());
  if (auto scheduled = service.schedule(call, parsed->scheduling, (*version)->model->spec()); !scheduled) {
    return tl::unexpected(scheduled.error());
  }
  const auto fetch_start = Clock::now();
  service.metrics().observe(metrics::Stage::kParse, (*version)->name, to_seconds(fetch_start - start));

  auto p = std::make_shared<Prediction>(
      Prediction{std::move(call), &codec, std::move(*parsed), std::move(*version), start, fetch_start});
  const bool networked = service.store().networked();
  service.store().fetch(p->call.worker, p->version->model_index, p->request.features,
                        [&service, p, networked](Result<feature_store::Found>&& found) {
                          if (networked) service.metrics().observe_feature_store(to_seconds(Clock::now() - p->fetch_start));
                          respond(service, p->call, [&] { return extract_and_enqueue(service, *p, std::move(found)); });
                        });
  return std::nullopt;  // answered through respond(), now or when the store answers
}

}  // namespace numaserve::api
