// The KServe Open Inference Protocol v2 routes: server and model metadata,
// health, and infer on already-extracted tensors (v2_json.cpp), which joins
// the same batches as /predict. infer checks in /predict's order: admit,
// then the model (its path names it), then the body (read against the
// model's inputs).
#include <charconv>

#include <nlohmann/json.hpp>

#include "api/handlers.h"
#include "codec/v2_json.h"
#include "numaserve/common/duration.h"

namespace numaserve::api {
namespace {

// Triton's binary tensor data extension: the header says how many bytes of
// the body are JSON, in a request and in a reply.
constexpr const char* kHeaderLength = "Inference-Header-Content-Length";

Result<std::optional<std::size_t>> binary_header_length(const http::Request& request) {
  const std::string_view value = request.header("inference-header-content-length");
  if (value.empty()) return std::nullopt;
  std::size_t length = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
  if (ec != std::errc() || end != value.data() + value.size()) {
    return make_error(Error::Code::kInvalidArgument, std::string(kHeaderLength) + ": want a byte count", kHeaderLength);
  }
  return length;
}

http::Reply json_reply(int status, std::string body) {
  http::Reply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

}  // namespace

Answer v2_server(Service& service, Call&) { return json_reply(200, codec::v2_server_metadata(service.config().version)); }

Answer v2_live(Service&, Call&) { return json_reply(200, R"({"live":true})"); }

Answer v2_ready(Service& service, Call&) {
  const bool ok = service.ready().has_value();
  return json_reply(ok ? 200 : 503, nlohmann::json{{"ready", ok}}.dump());
}

Answer v2_model(Service& service, Call& call) {
  const auto version = service.find_model(call.params.name, call.params.version);
  if (!version) return tl::unexpected(version.error());
  std::vector<std::string> served;
  for (const auto& v : service.models().versions((*version)->name)) served.push_back(v->version);
  return json_reply(200, codec::v2_model_metadata((*version)->model->spec(), served));
}

Answer v2_model_ready(Service& service, Call& call) {
  // A version not ready is a 404 naming it; one that is, is ready once the service is warm.
  const auto version = service.find_model(call.params.name, call.params.version);
  if (!version) return tl::unexpected(version.error());
  const bool ok = service.readiness().ready();
  return json_reply(ok ? 200 : 503, nlohmann::json{{"name", (*version)->name}, {"version", (*version)->version}, {"ready", ok}}.dump());
}

Answer v2_infer(Service& service, Call& call) {
  const auto start = batching::Clock::now();
  if (auto admitted = service.admit(call); !admitted) return tl::unexpected(admitted.error());
  auto version = service.find_model(call.params.name, call.params.version);
  if (!version) return tl::unexpected(version.error());
  const features::ModelSpec& spec = (*version)->model->spec();
  auto json_length = binary_header_length(call.request);
  if (!json_length) return tl::unexpected(json_length.error());
  auto parsed = codec::parse_infer_request(call.request.body, *json_length, spec, service.config().limits);
  if (!parsed) return tl::unexpected(parsed.error());
  if (auto scheduled = service.schedule(call, parsed->scheduling, spec); !scheduled) return tl::unexpected(scheduled.error());
  // As /predict's parse stage: what reading the tensors cost, JSON or binary.
  service.metrics().observe(metrics::Stage::kParse, spec.name, to_seconds(batching::Clock::now() - start));
  auto encode = [&spec, id = std::move(parsed->id), binary = parsed->binary_output](std::vector<float>&& scores) {
    auto encoded = codec::v2_infer_response(spec, id, scores, binary);
    http::Reply reply = json_reply(200, std::move(encoded.body));
    if (encoded.json_length) {
      reply.content_type = "application/octet-stream";
      reply.headers.emplace_back(kHeaderLength, std::to_string(*encoded.json_length));
    }
    return reply;
  };
  service.enqueue(call, std::move(*version), std::move(parsed->batch), start, std::move(encode));
  return std::nullopt;
}

}  // namespace numaserve::api
