// A Redis HMGET reply of Feast's online format, decoded for a model: never a
// crash; a refusal names the entity and the feature; what is accepted holds
// only the model's features, each of the kind the model reads.
// Input: per HMGET field, one length byte (255: the field is absent) and
// that many bytes; fields the input does not reach are absent.
#include <algorithm>
#include <chrono>

#include "feature_store/feast_format.h"
#include "fuzz.h"

using namespace numaserve;

namespace {

const feature_store::Layout& layout() {
  static const features::ModelSpec model = [] {
    auto spec = features::parse_model_spec(R"(
name: fuzz
version: "1"
tables: {t: 100}
features:
  - {name: price, source: item, kind: numeric}
  - {name: brand, source: item, kind: id, table: t, view: brands}
  - {name: tags, source: item, kind: id_list, table: t}
)",
                                           "model.yaml");
    if (!spec) std::abort();
    return *spec;
  }();
  static const feature_store::Layout built = *feature_store::Layout::build({&model});
  return built;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& item = layout().item();
  feature_store::Reply reply(item.hmget_fields().size());
  std::size_t at = 0;
  for (auto& field : reply) {
    if (at >= size) break;
    const std::size_t length = data[at++];
    if (length == 255) continue;
    const std::size_t take = std::min(length, size - at);
    field = std::string(reinterpret_cast<const char*>(data + at), take);
    at += take;
  }
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  auto decoded = feature_store::Layout::decode(item, "i7", reply, 3600, now);
  if (!decoded) {
    const auto& message = decoded.error().message;
    FUZZ_CHECK(message.find("entity 'i7'") != std::string::npos, "a refusal not naming the entity: %s", message.c_str());
    return 0;
  }
  for (const auto& entry : *decoded) {
    const std::string& name = entry.first;
    const features::FeatureValue& value = entry.second;
    const auto field = std::find_if(item.fields.begin(), item.fields.end(), [&](const feature_store::Field& f) { return f.feature == name; });
    FUZZ_CHECK(field != item.fields.end(), "a feature the model does not read: %s", name.c_str());
    const bool right = field->kind == features::Kind::kNumeric ? std::holds_alternative<double>(value)
                       : field->kind == features::Kind::kId    ? std::holds_alternative<std::string>(value)
                                                               : std::holds_alternative<std::vector<std::string>>(value);
    FUZZ_CHECK(right, "feature %s decoded as another kind", name.c_str());
  }
  return 0;
}
