#pragma once
// The model contract's feature half: model.yaml says which features a model
// reads, where each comes from, and how each becomes model input.
//
//   name: ranker_a
//   version: "3"
//   hash_seed: 0                # XXH64 seed, part of the contract
//   tables: {user: 100000, item: 200000, tag: 5000}   # embedding tables: rows
//   features:
//     - {name: user_id, source: user, kind: id, table: user}
//     - {name: tags, source: item, kind: id_list, table: tag, max_len: 8}
//     - {name: price, source: item, kind: numeric, transform: log1p, clip: [0, 12], default: 0}
//
// Hash contract (reproduce it in training): row = XXH64(utf8(id), hash_seed)
// mod rows(table), where an integer id is first written in decimal. Python:
// xxhash.xxh64_intdigest(str(v).encode(), seed) % rows.
// A feature with source "user" or "context" is computed once per request; an
// "item" feature once per candidate. A feature named "id" reads the entity's id.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "features/features.h"
#include "numaserve/common/result.h"

namespace numaserve::features {

enum class Source { kUser, kContext, kItem };
enum class Kind { kId, kIdList, kNumeric };
enum class Transform { kNone, kLog1p, kStandardize };

struct FeatureSpec {
  std::string name;
  Source source = Source::kItem;
  Kind kind = Kind::kNumeric;
  std::string table;          // id / id_list: the embedding table
  unsigned max_len = 0;       // id_list: longest bag kept (0 = no limit)
  Transform transform = Transform::kNone;
  double mean = 0, stddev = 1;  // standardize
  std::optional<double> clip_low, clip_high;  // applied after the transform
  FeatureValue default_value = 0.0;  // when the request and the store lack it
};

struct ModelSpec {
  std::string name;
  std::string version;
  std::uint64_t hash_seed = 0;
  std::map<std::string, std::uint64_t> tables;  // name -> rows
  std::vector<FeatureSpec> features;            // model input order

  // Numeric features in order: the columns of the dense input.
  std::vector<const FeatureSpec*> dense_features() const;
  // Id and id-list features in order: one embedding bag input each.
  std::vector<const FeatureSpec*> sparse_features() const;
  const FeatureSpec* feature(std::string_view name, Source source) const;
};

// `file` names the source in errors: "model.yaml line 7: features[2].kind ...".
Result<ModelSpec> parse_model_spec(const std::string& yaml, const std::string& file);

const char* to_string(Source source);

}  // namespace numaserve::features
