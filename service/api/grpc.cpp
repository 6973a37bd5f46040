// The gRPC services, on the gRPC port (http2_connection.h), each call
// through the same error boundary (router.cpp) as a REST route and, for
// Ranking.Predict and ModelInfer, the same admission, model resolution,
// checks, batches and forward as /predict and the v2 infer route; only
// the codec (grpc_codec.cpp, predict_proto.cpp) differs. A refusal is the gRPC status its
// Error maps to (errors.cpp), its message naming the field.
#include "api/handlers.h"
#include "codec/grpc_codec.h"
#include "codec/predict_proto.h"

namespace numaserve::api {
namespace {

http::Reply message_reply(std::string message) {
  http::Reply reply;
  reply.grpc_status = 0;
  reply.body = std::move(message);
  return reply;
}

const PredictCodec kProtobufCodec{&codec::parse_predict_proto, &codec::grpc::predict_reply};

// The services a health check may name: the server's ("") and each it offers.
bool known_service(const std::string& name) {
  return name.empty() || name == "numaserve.v1.Ranking" || name == "inference.GRPCInferenceService";
}

}  // namespace

// Serving once ready (warm, not draining, every model serving): what a
// Kubernetes gRPC readiness probe asks.
Answer grpc_health_check(Service& service, Call& call) {
  auto asked = codec::grpc::parse_health_check(call.request.body);
  if (!asked) return tl::unexpected(asked.error());
  if (!known_service(*asked)) return make_error(Error::Code::kNotFound, "no service '" + *asked + "' here", "service");
  return message_reply(codec::grpc::health_reply(service.ready().has_value()));
}

Answer ranking_predict(Service& service, Call& call) { return predict_with(service, call, kProtobufCodec); }

Answer grpc_server_live(Service&, Call&) { return message_reply(codec::grpc::server_live_reply(true)); }

Answer grpc_server_ready(Service& service, Call&) {
  return message_reply(codec::grpc::server_ready_reply(service.ready().has_value()));
}

Answer grpc_model_ready(Service& service, Call& call) {
  auto ref = codec::grpc::parse_model_ref(call.request.body);
  if (!ref) return tl::unexpected(ref.error());
  const auto version = service.find_model(ref->name, ref->version);
  if (!version) return tl::unexpected(version.error());
  return message_reply(codec::grpc::model_ready_reply(service.readiness().ready()));
}

Answer grpc_server_metadata(Service& service, Call&) {
  return message_reply(codec::grpc::server_metadata_reply(service.config().version));
}

Answer grpc_model_metadata(Service& service, Call& call) {
  auto ref = codec::grpc::parse_model_ref(call.request.body);
  if (!ref) return tl::unexpected(ref.error());
  const auto version = service.find_model(ref->name, ref->version);
  if (!version) return tl::unexpected(version.error());
  std::vector<std::string> served;
  for (const auto& v : service.models().versions((*version)->name)) served.push_back(v->version);
  return message_reply(codec::grpc::model_metadata_reply((*version)->model->spec(), served));
}

// The model is named in the message, so the message is read before the
// model is resolved (the REST route's path names it first).
Answer grpc_model_infer(Service& service, Call& call) {
  const auto start = batching::Clock::now();
  if (auto admitted = service.admit(call); !admitted) return tl::unexpected(admitted.error());
  auto parsed = codec::grpc::parse_model_infer(call.request.body);
  if (!parsed) return tl::unexpected(parsed.error());
  auto version = service.find_model(parsed->model.name, parsed->model.version);
  if (!version) return tl::unexpected(version.error());
  const features::ModelSpec& spec = (*version)->model->spec();
  if (auto scheduled = service.schedule(call, parsed->scheduling, spec); !scheduled) return tl::unexpected(scheduled.error());
  auto batch = codec::read_inputs(parsed->inputs, spec, service.config().limits);
  if (!batch) return tl::unexpected(batch.error());
  service.enqueue(call, std::move(*version), std::move(*batch), start, [&spec, id = std::move(parsed->id)](std::vector<float>&& scores) {
    return message_reply(codec::grpc::model_infer_reply(spec, id, scores));
  });
  return std::nullopt;
}

}  // namespace numaserve::api
