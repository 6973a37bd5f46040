#pragma once
// The routes' handlers, each a function of the shared state and one call;
// router.cpp maps methods and paths to them.

#include "api/call.h"
#include "api/service.h"
#include "codec/predict_json.h"

namespace numaserve::api {

// predict.cpp: POST /predict; predict_with is its way for any codec (the
// Ranking.Predict gRPC call's too).
Answer predict(Service& service, Call& call);
struct PredictCodec {
  Result<codec::PredictRequest> (*parse)(std::string_view body, const RequestLimits& limits);
  http::Reply (*encode)(codec::PredictResponse&& response);
};
Answer predict_with(Service& service, Call& call, const PredictCodec& codec);

// v2.cpp: KServe's Open Inference Protocol v2.
Answer v2_server(Service& service, Call& call);
Answer v2_live(Service& service, Call& call);
Answer v2_ready(Service& service, Call& call);
Answer v2_model(Service& service, Call& call);
Answer v2_model_ready(Service& service, Call& call);
Answer v2_infer(Service& service, Call& call);

// operations.cpp: what operators and probes ask.
Answer healthz(Service& service, Call& call);
Answer readyz(Service& service, Call& call);
Answer prometheus_metrics(Service& service, Call& call);
Answer placement(Service& service, Call& call);

// grpc.cpp: the gRPC services (the gRPC port): grpc.health.v1.Health,
// numaserve.v1.Ranking, and KServe v2's inference.GRPCInferenceService.
Answer grpc_health_check(Service& service, Call& call);
Answer ranking_predict(Service& service, Call& call);
Answer grpc_server_live(Service& service, Call& call);
Answer grpc_server_ready(Service& service, Call& call);
Answer grpc_model_ready(Service& service, Call& call);
Answer grpc_server_metadata(Service& service, Call& call);
Answer grpc_model_metadata(Service& service, Call& call);
Answer grpc_model_infer(Service& service, Call& call);

// repository.cpp: Triton's model repository extension (admin port only).
Answer repository_index(Service& service, Call& call);
Answer repository_load(Service& service, Call& call);
Answer repository_unload(Service& service, Call& call);
Answer grpc_repository_index(Service& service, Call& call);
Answer grpc_repository_load(Service& service, Call& call);
Answer grpc_repository_unload(Service& service, Call& call);

}  // namespace numaserve::api
