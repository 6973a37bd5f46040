#include "feature_store/feast_format.h"

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/timestamp.pb.h>
#include <murmurhash.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "value.pb.h"
#include "numaserve/common/duration.h"

namespace numaserve::feature_store {
namespace {

using features::FeatureValue;
using features::Kind;
namespace types = ::feast::types;  // value.proto's generated classes

// Feast's ValueType enum (Value.proto): the types an entity key may hold.
constexpr std::uint32_t kString = 2, kInt64 = 4;

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Feast writes a join key's length as Python's len(str): code points, not
// bytes (they differ only for a non-ASCII join key name).
std::uint32_t code_points(std::string_view utf8) {
  return static_cast<std::uint32_t>(
      std::count_if(utf8.begin(), utf8.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

std::string decimal(std::int64_t v) { return std::to_string(v); }

const char* member_name(const types::Value& v) {
  switch (v.val_case()) {
    case types::Value::kBytesVal: return "bytes";
    case types::Value::kStringVal: return "a string";
    case types::Value::kInt32Val:
    case types::Value::kInt64Val: return "an integer";
    case types::Value::kDoubleVal:
    case types::Value::kFloatVal: return "a number";
    case types::Value::kBoolVal: return "a bool";
    case types::Value::kUnixTimestampVal: return "a timestamp";
    case types::Value::kStringListVal: return "a list of strings";
    case types::Value::kInt32ListVal:
    case types::Value::kInt64ListVal: return "a list of integers";
    case types::Value::kDoubleListVal:
    case types::Value::kFloatListVal: return "a list of numbers";
    case types::Value::kNullVal:
    case types::Value::VAL_NOT_SET: break;
  }
  return "a kind numaserve does not read";
}

Result<std::optional<FeatureValue>> wrong(const types::Value& v, const char* want) {
  return make_error(Error::Code::kInvalidArgument, std::string("want ") + want + ", the store holds " + member_name(v));
}

std::optional<FeatureValue> number_of(const types::Value& v) {
  switch (v.val_case()) {
    case types::Value::kDoubleVal: return FeatureValue(v.double_val());
    case types::Value::kFloatVal: return FeatureValue(static_cast<double>(v.float_val()));
    case types::Value::kInt32Val: return FeatureValue(static_cast<double>(v.int32_val()));
    case types::Value::kInt64Val: return FeatureValue(static_cast<double>(v.int64_val()));
    case types::Value::kBoolVal: return FeatureValue(v.bool_val() ? 1.0 : 0.0);
    default: return std::nullopt;
  }
}

// An id as extraction hashes it: integers (and integral doubles, as the
// embedded store reads JSON numbers) in decimal.
std::optional<FeatureValue> id_of(const types::Value& v) {
  switch (v.val_case()) {
    case types::Value::kStringVal: return FeatureValue(v.string_val());
    case types::Value::kBytesVal: return FeatureValue(v.bytes_val());
    case types::Value::kInt32Val: return FeatureValue(decimal(v.int32_val()));
    case types::Value::kInt64Val: return FeatureValue(decimal(v.int64_val()));
    case types::Value::kDoubleVal:
      if (std::isfinite(v.double_val()) && v.double_val() == std::floor(v.double_val()) && std::abs(v.double_val()) < 9.2e18) {
        return FeatureValue(decimal(static_cast<std::int64_t>(v.double_val())));
      }
      return std::nullopt;
    default: return std::nullopt;
  }
}

std::optional<FeatureValue> ids_of(const types::Value& v) {
  std::vector<std::string> ids;
  switch (v.val_case()) {
    case types::Value::kStringListVal: ids.assign(v.string_list_val().val().begin(), v.string_list_val().val().end()); break;
    case types::Value::kInt64ListVal:
      for (const auto id : v.int64_list_val().val()) ids.push_back(decimal(id));
      break;
    case types::Value::kInt32ListVal:
      for (const auto id : v.int32_list_val().val()) ids.push_back(decimal(id));
      break;
    default: return std::nullopt;
  }
  return FeatureValue(std::move(ids));
}

}  // namespace

Result<std::string> entity_key(const features::EntityMapping& entity, std::string_view id) {
  std::string out;
  put_u32(out, 1);  // one join key
  put_u32(out, kString);
  put_u32(out, code_points(entity.join_key));
  out += entity.join_key;
  if (entity.int64_key) {
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
    if (ec != std::errc() || end != id.data() + id.size() || id.empty()) {
      return make_error(Error::Code::kInvalidArgument,
                        "id '" + std::string(id) + "' is not an int64, which join key " + entity.join_key + " holds");
    }
    put_u32(out, kInt64);
    put_u32(out, 8);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff));
  } else {
    put_u32(out, kString);
    put_u32(out, static_cast<std::uint32_t>(id.size()));
    out += id;
  }
  return out;
}

std::string feature_field(std::string_view view, std::string_view feature) {
  const std::string text = std::string(view) + ":" + std::string(feature);
  std::uint32_t hash[1] = {0};
  lmmh_x86_32(text.data(), static_cast<unsigned>(text.size()), 0, hash);
  std::string out;
  put_u32(out, hash[0]);
  return out;
}

std::string timestamp_field(std::string_view view) { return "_ts:" + std::string(view); }

std::string encode_value(const FeatureValue& value) {
  types::Value v;
  if (const auto* n = std::get_if<double>(&value)) {
    v.set_double_val(*n);
  } else if (const auto* s = std::get_if<std::string>(&value)) {
    v.set_string_val(*s);
  } else {
    auto* list = v.mutable_string_list_val();  // set even when empty: an empty list is not a null
    for (const auto& id : std::get<std::vector<std::string>>(value)) list->add_val(id);
  }
  return v.SerializeAsString();
}

Result<std::optional<FeatureValue>> decode_value(std::string_view bytes, Kind kind) {
  types::Value v;
  if (!v.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return make_error(Error::Code::kInvalidArgument, "not a serialized feast.types.Value");
  }
  if (v.val_case() == types::Value::kNullVal || v.val_case() == types::Value::VAL_NOT_SET) {
    // An empty Value is Feast's null too; a member numaserve does not
    // declare also parses unset, so tell the two apart by the bytes.
    if (v.val_case() == types::Value::VAL_NOT_SET && !bytes.empty()) return wrong(v, "a value numaserve reads");
    return std::optional<FeatureValue>();
  }
  switch (kind) {
    case Kind::kNumeric:
      if (auto n = number_of(v)) return n;
      return wrong(v, "a number");
    case Kind::kId:
      if (auto id = id_of(v)) return id;
      return wrong(v, "an id (a string or an integer)");
    case Kind::kIdList:
      if (auto ids = ids_of(v)) return ids;
      return wrong(v, "a list of ids");
  }
  return wrong(v, "a value");
}

void silence_protobuf_logs() { google::protobuf::SetLogHandler(nullptr); }

std::string encode_timestamp(std::chrono::system_clock::time_point when) {
  google::protobuf::Timestamp ts;
  const auto since = when.time_since_epoch();
  const auto seconds = std::chrono::floor<std::chrono::seconds>(since);
  ts.set_seconds(seconds.count());
  ts.set_nanos(static_cast<std::int32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(since - seconds).count()));
  return ts.SerializeAsString();
}

Result<std::chrono::system_clock::time_point> decode_timestamp(std::string_view bytes) {
  google::protobuf::Timestamp ts;
  if (!ts.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return make_error(Error::Code::kInvalidArgument, "not a serialized google.protobuf.Timestamp");
  }
  // The clock counts nanoseconds in 64 bits: about 292 years either side of 1970.
  constexpr std::int64_t kLimit = 9'000'000'000;
  if (ts.seconds() < -kLimit || ts.seconds() > kLimit || ts.nanos() < 0 || ts.nanos() > 999'999'999) {
    return make_error(Error::Code::kInvalidArgument, "timestamp out of range: " + std::to_string(ts.seconds()) + " s");
  }
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::seconds(ts.seconds()) +
                                                                      std::chrono::nanoseconds(ts.nanos())));
}

std::vector<std::string> EntityLayout::hmget_fields() const {
  std::vector<std::string> out;
  for (const auto& f : fields) out.push_back(f.hash);
  for (const auto& v : views) out.push_back(timestamp_field(v));
  return out;
}

Result<std::string> EntityLayout::redis_key(std::string_view id) const {
  auto key = entity_key(mapping, id);
  if (!key) return key;
  return *key + project;
}

namespace {

Status add_model(const features::ModelSpec& model, features::Source source, const features::EntityMapping& mapping,
                 EntityLayout& entity, bool first) {
  const std::string where = "model " + model.name + ": feature_store." + std::string(features::to_string(source));
  if (first) {
    entity.mapping = mapping;
    entity.project = model.store.project;
  } else if (entity.project != model.store.project || entity.mapping.join_key != mapping.join_key ||
             entity.mapping.int64_key != mapping.int64_key) {
    return make_error(Error::Code::kInvalidArgument,
                      where + ": the models served together must read one project and one join key per entity");
  }
  for (const auto& spec : model.features) {
    if (spec.source != source || spec.name == "id") continue;  // "id" is the entity's own id
    const std::string view = spec.view.empty() ? mapping.view : spec.view;
    const std::string hash = feature_field(view, spec.store_name.empty() ? spec.name : spec.store_name);
    const auto same = std::find_if(entity.fields.begin(), entity.fields.end(),
                                   [&](const Field& f) { return f.feature == spec.name; });
    if (same != entity.fields.end()) {
      if (same->kind != spec.kind || same->hash != hash) {
        return make_error(Error::Code::kInvalidArgument,
                          where + ": feature " + spec.name + " is read differently by another model served here");
      }
      continue;
    }
    auto at = std::find(entity.views.begin(), entity.views.end(), view);
    if (at == entity.views.end()) at = entity.views.insert(entity.views.end(), view);
    entity.fields.push_back(Field{spec.name, spec.kind, static_cast<std::size_t>(at - entity.views.begin()), hash});
  }
  return {};
}

}  // namespace

Result<Layout> Layout::build(const std::vector<const features::ModelSpec*>& models) {
  Layout layout;
  for (std::size_t m = 0; m < models.size(); ++m) {
    const auto& model = *models[m];
    if (auto s = add_model(model, features::Source::kUser, model.store.user, layout.user_, m == 0); !s) {
      return tl::unexpected(s.error());
    }
    if (auto s = add_model(model, features::Source::kItem, model.store.item, layout.item_, m == 0); !s) {
      return tl::unexpected(s.error());
    }
  }
  return layout;
}

Result<features::Features> Layout::decode(const EntityLayout& entity, std::string_view id, const Reply& reply,
                                          double max_age_seconds, std::chrono::system_clock::time_point now) {
  const std::size_t n = entity.fields.size();
  if (reply.size() != n + entity.views.size()) {
    return make_error(Error::Code::kInvalidArgument, "the store answered " + std::to_string(reply.size()) +
                                                         " fields for " + std::to_string(n + entity.views.size()));
  }
  std::vector<bool> fresh(entity.views.size(), true);
  if (max_age_seconds > 0) {
    for (std::size_t v = 0; v < entity.views.size(); ++v) {
      const auto& ts = reply[n + v];
      if (!ts) continue;  // Feast always writes one; without it, age is unknown: keep the values
      auto when = decode_timestamp(*ts);
      if (!when) return tl::unexpected(std::move(when.error()).with_context("entity '" + std::string(id) + "' " + timestamp_field(entity.views[v])));
      fresh[v] = to_seconds(now - *when) <= max_age_seconds;
    }
  }
  features::Features out;
  for (std::size_t i = 0; i < n; ++i) {
    const Field& field = entity.fields[i];
    if (!reply[i] || !fresh[field.view]) continue;
    auto value = decode_value(*reply[i], field.kind);
    if (!value) {
      return tl::unexpected(std::move(value.error()).with_context("entity '" + std::string(id) + "' feature " + field.feature +
                                                       " (view " + entity.views[field.view] + ")"));
    }
    if (*value) out.emplace(field.feature, std::move(**value));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Layout::encode(const EntityLayout& entity,
                                                                const features::Features& features,
                                                                std::chrono::system_clock::time_point event_time) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::string> views;
  for (const auto& entry : features) {
    const std::string& name = entry.first;  // a structured binding cannot be captured before C++20's clang 16
    const features::FeatureValue& value = entry.second;
    const auto field = std::find_if(entity.fields.begin(), entity.fields.end(), [&](const Field& f) { return f.feature == name; });
    const std::string& view = field != entity.fields.end() ? entity.views[field->view] : entity.mapping.view;
    out.emplace_back(field != entity.fields.end() ? field->hash : feature_field(view, name), encode_value(value));
    if (std::find(views.begin(), views.end(), view) == views.end()) views.push_back(view);
  }
  for (const auto& view : views) out.emplace_back(timestamp_field(view), encode_timestamp(event_time));
  return out;
}

}  // namespace numaserve::feature_store
