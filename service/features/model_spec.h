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
//
// Where a networked store keeps the user and item features (Feast's Redis
// online store, service/feature_store/): every key is optional, these are the
// defaults, the names the embedded JSON Lines store uses.
//   feature_store:
//     project: numaserve
//     user: {view: user, join_key: user_id, join_key_type: string}   # or int64
//     item: {view: item, join_key: item_id, join_key_type: string}
//   features:
//     - {name: price, source: item, kind: numeric, view: item_prices, store_name: price_usd}
// A feature's `view` overrides its entity's; `store_name` is its name in the
// view (default: its own name).
//
// The forward's precision (service/model/; docs/reference/model-contract.md):
//   precision: fp32              # the linear layers: or bf16, int8, bf16-if-available, int8-if-available
//   embedding_precision: int8    # the tables: fp32, bf16, int8 or int4 (rowwise); default: as precision
//   precision_max_drift: 0.005   # the largest |score - fp32 score| the load accepts
//   quantized_tables: [user]     # shipped already in embedding_precision (int8 or int4): tables/user.rowwise
//
// Serving (service/batching/):
//   priority: 2                  # the level of a request that names none; default: serve --default-priority

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "features/features.h"
#include "numaserve/common/names.h"
#include "numaserve/common/result.h"

namespace numaserve::features {

// The models one service serves at most over its life: each model added
// after start takes the next number, a removed one keeps its number (the
// feature store, metrics and model table index their per-model state so).
inline constexpr std::size_t kMaxModels = 64;

enum class Source { kUser, kContext, kItem };
enum class Kind { kId, kIdList, kNumeric };
enum class Transform { kNone, kLog1p, kStandardize };
// As model.yaml writes them (and errors and tensor names say them).
inline constexpr auto kSourceNames =
    make_names<Source>({{Source::kUser, "user"}, {Source::kContext, "context"}, {Source::kItem, "item"}});
inline constexpr auto kKindNames =
    make_names<Kind>({{Kind::kId, "id"}, {Kind::kIdList, "id_list"}, {Kind::kNumeric, "numeric"}});
enum class Precision { kFp32, kBf16, kBf16IfAvailable, kInt8, kInt8IfAvailable };
inline constexpr auto kPrecisionNames = make_names<Precision>({{Precision::kFp32, "fp32"},
                                                               {Precision::kBf16, "bf16"},
                                                               {Precision::kBf16IfAvailable, "bf16-if-available"},
                                                               {Precision::kInt8, "int8"},
                                                               {Precision::kInt8IfAvailable, "int8-if-available"}});
// How the embedding tables are stored: int8 and int4 are rowwise (codes, a
// scale and a bias per row), and need no particular instruction.
enum class TablePrecision { kFp32, kBf16, kInt8, kInt4 };
inline constexpr auto kTablePrecisionNames = make_names<TablePrecision>(
    {{TablePrecision::kFp32, "fp32"}, {TablePrecision::kBf16, "bf16"}, {TablePrecision::kInt8, "int8"}, {TablePrecision::kInt4, "int4"}});
// The tables' precision where none is written: the linear layers' (an int8
// model is int8 throughout; bf16 tables came with bf16 before the key existed).
TablePrecision tables_following(Precision precision);
// The bits of a rowwise code in `p`: 8 or 4, or 0 (fp32, bf16: not rowwise).
int rowwise_bits(TablePrecision p);
inline constexpr double kDefaultMaxDrift = 5e-3;
inline constexpr auto kTransformNames = make_names<Transform>(
    {{Transform::kNone, "none"}, {Transform::kLog1p, "log1p"}, {Transform::kStandardize, "standardize"}});

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
  std::string view;        // feature view in a networked store; empty: the entity's
  std::string store_name;  // its name in that view; empty: `name`
  bool operator==(const FeatureSpec&) const = default;
};

// How a networked store keys one kind of entity (feature_store.user / .item).
struct EntityMapping {
  std::string view;      // the default feature view of its features
  std::string join_key;  // the entity key's one join key
  bool int64_key = false;  // the key's value is an INT64 (the id's decimal text), else a STRING
  bool operator==(const EntityMapping&) const = default;
};

struct StoreMapping {
  std::string project = "numaserve";
  EntityMapping user{"user", "user_id"};
  EntityMapping item{"item", "item_id"};
  bool operator==(const StoreMapping&) const = default;
};

struct ModelSpec {
  std::string name;
  std::string version;
  std::uint64_t hash_seed = 0;
  std::map<std::string, std::uint64_t> tables;  // name -> rows
  std::vector<FeatureSpec> features;            // model input order
  StoreMapping store;                           // where a networked store keeps them
  Precision precision = Precision::kFp32;
  std::optional<TablePrecision> embedding_precision;  // unset: tables_following(precision)
  std::vector<std::string> quantized_tables;          // shipped rowwise, in embedding_precision
  double precision_max_drift = kDefaultMaxDrift;
  // The priority level a request for it takes when it names none (1 is the
  // highest; one beyond the server's levels is its lowest); 0: the server's
  // default. Not part of the feature contract: versions may differ.
  std::size_t priority = 0;

  // Numeric features in order: the columns of the dense input.
  std::vector<const FeatureSpec*> dense_features() const;
  // Id and id-list features in order: one embedding bag input each.
  std::vector<const FeatureSpec*> sparse_features() const;
  const FeatureSpec* feature(std::string_view name, Source source) const;
};

// `file` names the source in errors: "model.yaml line 7: features[2].kind ...".
// Whether two specs turn every request into the same rows from the same
// stored features (all but name and version equal): a new version of a
// served model must, since the feature store and its item caches were set
// up for the first. Names the first difference otherwise.
Status same_feature_contract(const ModelSpec& served, const ModelSpec& candidate);

Result<ModelSpec> parse_model_spec(const std::string& yaml, const std::string& file);
// A model directory's contract: its model.yaml, read and parsed.
Result<ModelSpec> read_model_spec(const std::string& model_dir);

inline std::string_view to_string(Source source) { return kSourceNames.name(source); }

}  // namespace numaserve::features
