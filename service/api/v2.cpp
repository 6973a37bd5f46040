// The KServe Open Inference Protocol v2 routes: server and model metadata,
// health, and infer on already-extracted tensors (http/v2_json.cpp), which
// joins the same batches as /predict.
#include <nlohmann/json.hpp>

#include "api/service.h"
#include "http/v2_json.h"

namespace numaserve::api {
namespace {

http::Reply json_reply(int status, std::string body) {
  http::Reply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

}  // namespace

Answer Service::v2_server(Call&) { return json_reply(200, http::v2_server_metadata(config_.version)); }

Answer Service::v2_live(Call&) { return json_reply(200, R"({"live":true})"); }

Answer Service::v2_ready(Call&) {
  const bool ok = ready_;
  return json_reply(ok ? 200 : 503, nlohmann::json{{"ready", ok}}.dump());
}

Answer Service::v2_model(Call& call) {
  const auto index = find_model(call.params.name, call.params.version);
  if (!index) return tl::unexpected(index.error());
  return json_reply(200, http::v2_model_metadata(models_[*index]->spec()));
}

Answer Service::v2_model_ready(Call& call) {
  const auto index = find_model(call.params.name, call.params.version);
  if (!index) return tl::unexpected(index.error());
  const bool ok = ready_;
  return json_reply(ok ? 200 : 503, nlohmann::json{{"name", models_[*index]->spec().name}, {"ready", ok}}.dump());
}

Answer Service::v2_infer(Call& call) {
  const auto start = batching::Clock::now();
  const auto index = find_model(call.params.name, call.params.version);
  if (!index) return tl::unexpected(index.error());
  if (auto admitted = batcher_.admit(call.worker); !admitted) return tl::unexpected(admitted.error());
  const features::ModelSpec& spec = models_[*index]->spec();
  auto parsed = http::parse_infer_request(call.request.body, spec, config_.limits);
  if (!parsed) return tl::unexpected(parsed.error());
  if (!warm_) return make_error(Error::Code::kUnavailable, "not ready: warming up");
  enqueue(call, *index, std::move(parsed->batch), start, [&spec, id = std::move(parsed->id)](std::vector<float>&& scores) {
    return json_reply(200, http::v2_infer_response(spec, id, scores));
  });
  return std::nullopt;
}

}  // namespace numaserve::api
