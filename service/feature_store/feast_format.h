#pragma once
// Feast's Redis online store, byte for byte as Feast writes it (checked
// against Feast's sdk/python/feast/infra/online_stores/redis.py, helpers.py
// and key_encoding_utils.py; the cross-check test writes with Python):
//
//   key    serialize_entity_key(v3) + project:
//          u32 number of join keys, then per join key (sorted by name)
//          u32 ValueType STRING (2), u32 length, the name; then per value
//          u32 ValueType, u32 length, the bytes (STRING 2: UTF-8, INT64 4:
//          8 bytes little-endian). All integers little-endian.
//   field  per feature: MurmurHash3_x86_32("<view>:<feature>", seed 0) as
//          4 little-endian bytes; per view: "_ts:<view>", a serialized
//          google.protobuf.Timestamp of the row's event time
//   value  a serialized feast.types.Value (value.proto)
//
// Layout maps a model's features (model.yaml's feature_store section) onto
// those keys and fields: which fields one HMGET asks for, and how its reply
// becomes the Features extraction reads. Pure: no network here.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "features/features.h"
#include "features/model_spec.h"
#include "numaserve/common/result.h"

namespace numaserve::feature_store {

// The v3 serialized entity key of an entity with one join key.
Result<std::string> entity_key(const features::EntityMapping& entity, std::string_view id);
// The 4-byte hash field of "<view>:<feature>".
std::string feature_field(std::string_view view, std::string_view feature);
std::string timestamp_field(std::string_view view);  // "_ts:<view>"

// A feature value as a serialized feast.types.Value: a number as double_val,
// an id as string_val, a list of ids as string_list_val.
std::string encode_value(const features::FeatureValue& value);
// What a model of feature kind `kind` reads from a serialized Value: any
// numeric member for a numeric feature; a string, or an integer written in
// decimal, for an id; a list of strings or integers for an id list.
// nullopt: a null or unset value (the feature is missing). An error says
// what the bytes hold instead.
Result<std::optional<features::FeatureValue>> decode_value(std::string_view bytes, features::Kind kind);
// libprotobuf logs every malformed string it parses to stderr: with a bad
// value in Redis, a line per request. A bad value is ours to report (the
// error and its counter). Not thread-safe: call once at start.
void silence_protobuf_logs();
std::string encode_timestamp(std::chrono::system_clock::time_point when);
Result<std::chrono::system_clock::time_point> decode_timestamp(std::string_view bytes);

// One field of an entity's hash and the feature it fills.
struct Field {
  std::string feature;  // the model's name for it (the key in Features)
  features::Kind kind;
  std::size_t view;     // index into EntityLayout::views
  std::string hash;     // the hash field
};

// What the store holds for one kind of entity (users or items), for every
// model served.
struct EntityLayout {
  features::EntityMapping mapping;
  std::string project;
  std::vector<std::string> views;
  std::vector<Field> fields;
  // The HMGET fields in order: every feature's hash, then each view's "_ts:".
  std::vector<std::string> hmget_fields() const;
  Result<std::string> redis_key(std::string_view id) const;
};

// One HMGET's reply, field by field in hmget_fields() order: nullopt for a
// field the hash does not have.
using Reply = std::vector<std::optional<std::string>>;

class Layout {
 public:
  // The union of the models' user and item features. Models must agree on
  // the project and the entities' keys, and on the kind of a feature they
  // both read; an error names the model and the field.
  static Result<Layout> build(const std::vector<const features::ModelSpec*>& models);
  const EntityLayout& user() const { return user_; }
  const EntityLayout& item() const { return item_; }

  // The features an entity's reply holds. A view whose timestamp is more
  // than `max_age_seconds` before `now` (when above 0) counts as missing, as
  // does a missing field. A value the model cannot read is an error naming
  // the entity and feature.
  static Result<features::Features> decode(const EntityLayout& entity, std::string_view id, const Reply& reply,
                                           double max_age_seconds, std::chrono::system_clock::time_point now);
  // What to write for an entity: (field, value) pairs, each view's
  // timestamp included. A feature the layout does not map goes to the
  // entity's own view under its own name.
  static std::vector<std::pair<std::string, std::string>> encode(const EntityLayout& entity,
                                                                 const features::Features& features,
                                                                 std::chrono::system_clock::time_point event_time);

 private:
  EntityLayout user_, item_;
};

}  // namespace numaserve::feature_store
