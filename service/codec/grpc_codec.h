#pragma once
// The gRPC services' messages (proto/) as the API's plain types, the way
// predict_json.h and v2_json.h are for JSON: grpc_codec.cpp is the only
// file that knows protobuf's generated classes. A refusal names the field
// the client set, as the JSON codecs' do ("items[3].id: required").

#include <string>
#include <string_view>
#include <vector>

#include "codec/predict_json.h"
#include "codec/v2_json.h"
#include "features/model_spec.h"
#include "http/message.h"
#include "numaserve/common/result.h"

namespace numaserve::lifecycle {
struct RepositoryEntry;  // lifecycle/control.h
}

namespace numaserve::codec::grpc {

// numaserve.v1.Ranking/Predict (its request is read by predict_proto.h)
http::Reply predict_reply(PredictResponse&& response);
// A request as a client sends it (the benchmark's load generator's bodies).
std::string predict_message(const PredictRequest& request);

// grpc.health.v1.Health/Check: the service asked about ("": the server).
Result<std::string> parse_health_check(std::string_view message);
std::string health_reply(bool serving);

// inference.GRPCInferenceService
struct ModelRef {
  std::string name, version;
};
Result<ModelRef> parse_model_ref(std::string_view message);  // ModelReadyRequest, ModelMetadataRequest
std::string server_live_reply(bool live);
std::string server_ready_reply(bool ready);
std::string model_ready_reply(bool ready);
std::string server_metadata_reply(std::string_view version);
std::string model_metadata_reply(const features::ModelSpec& model, const std::vector<std::string>& versions);

// Triton's repository extension (the admin port only).
Result<bool> parse_repository_index(std::string_view message);  // true: only what is ready
// A RepositoryModelLoad or -Unload request (the same fields): the model named.
Result<std::string> parse_repository_model(std::string_view message);
std::string repository_index_reply(const std::vector<lifecycle::RepositoryEntry>& entries);

struct InferCall {
  ModelRef model;
  std::string id;
  std::vector<InputTensor> inputs;  // read_inputs() checks them against the model
  Scheduling scheduling;            // its "priority" and "timeout" parameters (int64 or uint64)
};
Result<InferCall> parse_model_infer(std::string_view message);
// The scores as raw_output_contents, as Triton's server sends them.
std::string model_infer_reply(const features::ModelSpec& model, const std::string& id, const std::vector<float>& scores);

}  // namespace numaserve::codec::grpc
