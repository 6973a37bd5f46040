// What a gRPC client sends, past HTTP/2 (nghttp2 frames that): the first
// byte picks the part, the rest is its input. 0: a unary call's
// length-prefixed message (grpc_wire), 1: a grpc-timeout value, 2: a status
// message to percent-encode, 3: a Ranking.Predict request (read by
// predict_proto.cpp exactly as protobuf's generated parser reads it: taken
// by both or neither, the same request from both), 4: a ModelInfer
// request on a model with every kind of input. Never a crash; a refusal
// names its field or its status; what is accepted is exactly what the
// model's forward takes.
#include <cmath>
#include <optional>

#include <google/protobuf/stubs/logging.h>

#include "codec/grpc_codec.h"
#include "codec/predict_proto.h"
#include "fixture_spec.h"
#include "fuzz.h"
#include "http/grpc_wire.h"
#include "ranking.pb.h"

using namespace numaserve;

namespace {

tl::unexpected<Error> fail(const std::string& what) {
  return make_error(Error::Code::kInvalidArgument, what, what);
}

void unframe(std::string_view body) {
  const auto got = http::grpc::unframe(body, 64);
  if (got.code == http::grpc::kOk) {
    FUZZ_CHECK(got.message.size() <= 64, "%zu bytes past the limit", got.message.size());
    FUZZ_CHECK(http::grpc::frame(got.message) == body, "the message does not frame back to the body");
  } else {
    FUZZ_CHECK(!got.error.empty(), "status %d without a message", got.code);
  }
}

void encode(std::string_view message) {
  const std::string out = http::grpc::percent_encode(message);
  std::string back;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto c = static_cast<unsigned char>(out[i]);
    FUZZ_CHECK(c >= 0x20 && c <= 0x7e, "byte %u in grpc-message", c);
    if (c != '%') {
      back += out[i];
      continue;
    }
    FUZZ_CHECK(i + 2 < out.size(), "a cut escape");
    back += static_cast<char>(std::stoi(out.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  FUZZ_CHECK(back == message, "percent-encoding does not decode back");
}

// The reference for predict_proto.cpp: protobuf's generated parser, its
// message then read into the API's types under the same rules.
Result<codec::PredictRequest> reference(std::string_view message, const api::RequestLimits& limits) {
  numaserve::v1::PredictRequest in;
  if (!in.ParseFromArray(message.data(), static_cast<int>(message.size()))) return fail("message");
  auto read_features = [&limits](const google::protobuf::Map<std::string, numaserve::v1::FeatureValue>& map)
      -> Result<features::Features> {
    if (map.size() > limits.max_features_per_entity) return fail("features");
    features::Features out;
    for (const auto& [key, value] : map) {
      switch (value.kind_case()) {
        case numaserve::v1::FeatureValue::kNumber:
          if (!std::isfinite(value.number())) return fail(key);
          out.emplace(key, value.number());
          break;
        case numaserve::v1::FeatureValue::kId: out.emplace(key, value.id()); break;
        case numaserve::v1::FeatureValue::kIds:
          if (static_cast<std::size_t>(value.ids().ids_size()) > limits.max_list_length) return fail(key);
          out.emplace(key, std::vector<std::string>(value.ids().ids().begin(), value.ids().ids().end()));
          break;
        case numaserve::v1::FeatureValue::KIND_NOT_SET: return fail(key);
      }
    }
    return out;
  };
  auto read_entity = [&read_features](const numaserve::v1::Entity& entity) -> Result<features::Entity> {
    if (entity.id().empty()) return fail("id");
    auto features = read_features(entity.features());
    if (!features) return tl::unexpected(features.error());
    return features::Entity{entity.id(), std::move(*features)};
  };
  codec::PredictRequest out;
  if (!in.model().empty()) out.model = in.model();
  out.version = in.version();
  out.request_id = in.request_id();
  if (in.priority() != 0) out.scheduling.priority = in.priority();
  if (!in.has_user()) return fail("user");
  auto user = read_entity(in.user());
  auto context = read_features(in.context());
  if (!user || !context) return fail("user or context");
  out.features.user = std::move(*user);
  out.features.context = std::move(*context);
  if (in.items().empty() || static_cast<std::size_t>(in.items_size()) > limits.max_items) return fail("items");
  for (const auto& one : in.items()) {
    auto item = read_entity(one);
    if (!item) return fail("an item");
    out.features.items.push_back(std::move(*item));
  }
  return out;
}

bool same(const features::Entity& a, const features::Entity& b) { return a.id == b.id && a.features == b.features; }

// The hand-written reader takes exactly what the generated parser takes,
// and reads the same request from it.
void predict(std::string_view message) {
  api::RequestLimits limits;
  limits.max_items = 64;
  limits.max_features_per_entity = 8;
  limits.max_list_length = 8;
  const auto request = codec::parse_predict_proto(message, limits);
  const auto expected = reference(message, limits);
  FUZZ_CHECK(request.has_value() == expected.has_value(), "taken by %s only",
             request ? "predict_proto" : "protobuf's parser");
  if (!request) {
    FUZZ_CHECK(!request.error().field.empty(), "refused without a field: %s", request.error().message.c_str());
    return;
  }
  FUZZ_CHECK(request->model == expected->model && request->version == expected->version &&
                 request->request_id == expected->request_id && request->scheduling.priority == expected->scheduling.priority,
             "model, version, request_id or priority differ");
  FUZZ_CHECK(same(request->features.user, expected->features.user), "the user differs");
  FUZZ_CHECK(request->features.context == expected->features.context, "the context differs");
  const auto& items = request->features.items;
  FUZZ_CHECK(items.size() == expected->features.items.size(), "%zu items, want %zu", items.size(),
             expected->features.items.size());
  for (std::size_t i = 0; i < items.size(); ++i) FUZZ_CHECK(same(items[i], expected->features.items[i]), "item %zu differs", i);
}

void infer(std::string_view message) {
  auto call = codec::grpc::parse_model_infer(message);
  if (!call) {
    FUZZ_CHECK(!call.error().field.empty(), "refused without a field: %s", call.error().message.c_str());
    return;
  }
  api::RequestLimits limits;
  limits.max_items = 64;
  const auto batch = codec::read_inputs(call->inputs, fuzz::fixture_spec(), limits);
  if (!batch) {
    FUZZ_CHECK(!batch.error().field.empty(), "refused without a field: %s", batch.error().message.c_str());
    return;
  }
  FUZZ_CHECK(batch->rows >= 1 && batch->rows <= limits.max_items, "%zu rows", batch->rows);
  FUZZ_CHECK(batch->dense.size() == batch->rows * fuzz::fixture_spec().dense_features().size(), "dense %zu values", batch->dense.size());
  const auto sparse = fuzz::fixture_spec().sparse_features();
  FUZZ_CHECK(batch->bags.size() == sparse.size(), "%zu bags", batch->bags.size());
  for (std::size_t k = 0; k < sparse.size(); ++k) {
    const auto& bag = batch->bags[k];
    const auto table_rows = static_cast<std::int64_t>(fuzz::fixture_spec().tables.at(sparse[k]->table));
    FUZZ_CHECK(bag.offsets.size() == batch->rows && bag.offsets[0] == 0, "bag %zu offsets", k);
    for (const auto index : bag.indices) FUZZ_CHECK(index >= 0 && index < table_rows, "index %lld", static_cast<long long>(index));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);  // its parser's UTF-8 complaints
  (void)quiet;
  if (size == 0) return 0;
  const std::string_view rest = fuzz::text(data + 1, size - 1);
  switch (data[0] % 5) {
    case 0: unframe(rest); break;
    case 1: {
      const auto timeout = http::grpc::parse_timeout(rest);
      FUZZ_CHECK(!timeout || timeout->count() >= 0, "a negative timeout");
      break;
    }
    case 2: encode(rest); break;
    case 3: predict(rest); break;
    default: infer(rest); break;
  }
  return 0;
}
