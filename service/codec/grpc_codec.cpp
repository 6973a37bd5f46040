#include "codec/grpc_codec.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <variant>

#include "lifecycle/control.h"
#include "health.pb.h"
#include "inference.pb.h"
#include "ranking.pb.h"

namespace numaserve::codec::grpc {
namespace {

tl::unexpected<Error> bad(const std::string& field, const std::string& message) {
  return make_error(Error::Code::kInvalidArgument, field + ": " + message, field);
}

template <typename Message>
Result<Message> parse(std::string_view bytes) {
  Message message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return bad("message", "not a valid " + Message::descriptor()->full_name() + " message");
  }
  return message;
}

// A ModelInfer request is a message per input and a string per tensor's
// bytes: parsed into an arena that starts in this thread's own block, they
// cost no malloc or free each and are dropped at once with it (the same
// arena parsed Ranking.Predict's 200 items in a third of the heap's time,
// before predict_proto.cpp read them without messages at all).
class ParseArena {
 public:
  ParseArena() : arena_(options()) {}
  template <typename Message>
  Result<Message*> parse(std::string_view bytes) {
    auto* message = google::protobuf::Arena::CreateMessage<Message>(&arena_);
    if (!message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return bad("message", "not a valid " + Message::descriptor()->full_name() + " message");
    }
    return message;
  }

 private:
  static google::protobuf::ArenaOptions options() {
    alignas(64) thread_local std::array<char, 256u << 10> block;
    google::protobuf::ArenaOptions o;
    o.initial_block = block.data();
    o.initial_block_size = block.size();
    return o;
  }
  google::protobuf::Arena arena_;
};

template <typename Message>
std::string serialized(const Message& message) {
  std::string out;
  message.SerializeToString(&out);
  return out;
}

void describe(const TensorSpec& spec, inference::ModelMetadataResponse::TensorMetadata& out) {
  out.set_name(spec.name);
  out.set_datatype(spec.datatype);
  for (const auto d : spec.shape) out.add_shape(d);
}

template <typename T>
std::string bytes_of(const google::protobuf::RepeatedField<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), static_cast<std::size_t>(values.size()) * sizeof(T));
}

// An input's data: its raw_input_contents entry, or its typed contents.
Status read_data(const inference::ModelInferRequest& request, int i, InputTensor& t) {
  const auto& input = request.inputs(i);
  if (request.raw_input_contents_size() > 0) {
    if (input.has_contents()) return bad(t.field + ".contents", "given as well as raw_input_contents: give one");
    t.data = request.raw_input_contents(i);
    t.data_field = "raw_input_contents[" + std::to_string(i) + "]";
    return {};
  }
  t.data_field = t.field + ".contents";
  const auto& contents = input.contents();
  if (t.datatype == "FP32") {
    if (contents.int64_contents_size() > 0) return bad(t.data_field, "FP32 data belongs in fp32_contents");
    t.data = bytes_of(contents.fp32_contents());
  } else if (t.datatype == "INT64") {
    if (contents.fp32_contents_size() > 0) return bad(t.data_field, "INT64 data belongs in int64_contents");
    t.data = bytes_of(contents.int64_contents());
  }
  return {};
}

}  // namespace

http::Reply predict_reply(PredictResponse&& response) {
  numaserve::v1::PredictResponse out;
  out.set_model(response.model);
  out.set_model_version(response.version);
  out.set_request_id(response.request_id);
  out.mutable_scores()->Add(response.scores.begin(), response.scores.end());
  http::Reply reply;
  reply.grpc_status = 0;
  reply.body = serialized(out);
  return reply;
}

namespace {

void write_features(const features::Features& in, google::protobuf::Map<std::string, numaserve::v1::FeatureValue>& out) {
  for (const auto& [key, value] : in) {
    auto& v = out[key];
    if (const auto* number = std::get_if<double>(&value)) {
      v.set_number(*number);
    } else if (const auto* id = std::get_if<std::string>(&value)) {
      v.set_id(*id);
    } else {
      auto* ids = v.mutable_ids();  // set even when empty: an empty list is still a list
      for (const auto& one : std::get<std::vector<std::string>>(value)) ids->add_ids(one);
    }
  }
}

void write_entity(const features::Entity& in, numaserve::v1::Entity& out) {
  out.set_id(in.id);
  write_features(in.features, *out.mutable_features());
}

}  // namespace

std::string predict_message(const PredictRequest& request) {
  numaserve::v1::PredictRequest out;
  if (request.model) out.set_model(*request.model);
  out.set_version(request.version);
  out.set_request_id(request.request_id);
  if (request.scheduling.priority) out.set_priority(static_cast<std::uint32_t>(*request.scheduling.priority));
  write_entity(request.features.user, *out.mutable_user());
  write_features(request.features.context, *out.mutable_context());
  for (const auto& item : request.features.items) write_entity(item, *out.add_items());
  return serialized(out);
}

Result<std::string> parse_health_check(std::string_view message) {
  auto in = parse<::grpc::health::v1::HealthCheckRequest>(message);
  if (!in) return tl::unexpected(in.error());
  return in->service();
}

std::string health_reply(bool serving) {
  ::grpc::health::v1::HealthCheckResponse out;
  out.set_status(serving ? ::grpc::health::v1::HealthCheckResponse::SERVING : ::grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  return serialized(out);
}

Result<ModelRef> parse_model_ref(std::string_view message) {
  // ModelReadyRequest and ModelMetadataRequest are the same message: name 1, version 2.
  auto in = parse<inference::ModelReadyRequest>(message);
  if (!in) return tl::unexpected(in.error());
  if (in->name().empty()) return bad("name", "required");
  return ModelRef{in->name(), in->version()};
}

std::string server_live_reply(bool live) {
  inference::ServerLiveResponse out;
  out.set_live(live);
  return serialized(out);
}

std::string server_ready_reply(bool ready) {
  inference::ServerReadyResponse out;
  out.set_ready(ready);
  return serialized(out);
}

std::string model_ready_reply(bool ready) {
  inference::ModelReadyResponse out;
  out.set_ready(ready);
  return serialized(out);
}

std::string server_metadata_reply(std::string_view version) {
  inference::ServerMetadataResponse out;
  out.set_name("numaserve");
  out.set_version(std::string(version));
  for (const auto& e : kV2Extensions) out.add_extensions(e);
  return serialized(out);
}

std::string model_metadata_reply(const features::ModelSpec& model, const std::vector<std::string>& versions) {
  inference::ModelMetadataResponse out;
  out.set_name(model.name);
  for (const auto& v : versions) out.add_versions(v);
  out.set_platform(kV2Platform);
  for (const auto& t : v2_inputs(model)) describe(t, *out.add_inputs());
  describe(v2_output(), *out.add_outputs());
  return serialized(out);
}

Result<bool> parse_repository_index(std::string_view message) {
  auto in = parse<inference::RepositoryIndexRequest>(message);
  if (!in) return tl::unexpected(in.error());
  if (!in->repository_name().empty()) return bad("repository_name", "this server has one repository: leave it empty");
  return in->ready();
}

Result<std::string> parse_repository_model(std::string_view message) {
  // RepositoryModelUnloadRequest has RepositoryModelLoadRequest's fields.
  auto in = parse<inference::RepositoryModelLoadRequest>(message);
  if (!in) return tl::unexpected(in.error());
  if (!in->repository_name().empty()) return bad("repository_name", "this server has one repository: leave it empty");
  // unload_dependents (Triton's client sets it on every unload) asks for
  // the models an ensemble built on this one: numaserve has no ensembles.
  for (const auto& [key, value] : in->parameters()) {
    if (key == "unload_dependents") continue;
    return bad(member_field("parameters", key), "a model is loaded from its files in the repository as they are: "
                                                "no config or file parameters");
  }
  if (in->model_name().empty()) return bad("model_name", "required");
  return in->model_name();
}

std::string repository_index_reply(const std::vector<lifecycle::RepositoryEntry>& entries) {
  inference::RepositoryIndexResponse out;
  for (const auto& e : entries) {
    auto* model = out.add_models();
    model->set_name(e.name);
    model->set_version(e.version);
    model->set_state(std::string(lifecycle::state_name(e.state)));
    model->set_reason(e.reason);
  }
  return serialized(out);
}

Result<InferCall> parse_model_infer(std::string_view message) {
  ParseArena arena;
  auto parsed = arena.parse<inference::ModelInferRequest>(message);
  if (!parsed) return tl::unexpected(parsed.error());
  const inference::ModelInferRequest* in = *parsed;
  if (in->model_name().empty()) return bad("model_name", "required");
  if (in->raw_input_contents_size() > 0 && in->raw_input_contents_size() != in->inputs_size()) {
    return bad("raw_input_contents", std::to_string(in->raw_input_contents_size()) + " entries for " +
                                         std::to_string(in->inputs_size()) + " inputs: want one per input");
  }
  for (int i = 0; i < in->outputs_size(); ++i) {
    if (in->outputs(i).name() != v2_output().name) {
      return bad("outputs[" + std::to_string(i) + "].name", "the model's only output is 'score'");
    }
  }
  InferCall out{{in->model_name(), in->model_version()}, in->id(), {}, {}};
  for (const auto& [key, target] : {std::pair{"priority", &out.scheduling.priority}, std::pair{"timeout", &out.scheduling.timeout_us}}) {
    const auto found = in->parameters().find(key);
    if (found == in->parameters().end()) continue;
    const auto& p = found->second;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
      *target = p.int64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      *target = saturated(p.uint64_param());
    } else {
      return bad(std::string("parameters.") + key, "want an int64_param or uint64_param");
    }
  }
  for (int i = 0; i < in->inputs_size(); ++i) {
    const auto& input = in->inputs(i);
    InputTensor t{"inputs[" + std::to_string(i) + "]", input.name(), input.datatype(),
                  std::vector<std::int64_t>(input.shape().begin(), input.shape().end()), "", ""};
    for (const auto d : t.shape) {
      if (d < 0) return bad(t.field + ".shape", "want sizes >= 0");
    }
    if (auto read = read_data(*in, i, t); !read) return tl::unexpected(read.error());
    out.inputs.push_back(std::move(t));
  }
  return out;
}

std::string model_infer_reply(const features::ModelSpec& model, const std::string& id, const std::vector<float>& scores) {
  inference::ModelInferResponse out;
  out.set_model_name(model.name);
  out.set_model_version(model.version);
  out.set_id(id);
  auto* score = out.add_outputs();
  score->set_name(v2_output().name);
  score->set_datatype(v2_output().datatype);
  score->add_shape(static_cast<std::int64_t>(scores.size()));
  out.add_raw_output_contents(std::string(reinterpret_cast<const char*>(scores.data()), scores.size() * sizeof(float)));
  return serialized(out);
}

}  // namespace numaserve::codec::grpc
