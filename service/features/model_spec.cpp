#include "features/model_spec.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "numaserve/common/text_file.h"
#include "numaserve/common/yaml_file.h"

namespace numaserve::features {
namespace {

Error bad(const std::string& file, const YamlNode& at, const std::string& field, const std::string& message) {
  return Error{Error::Code::kInvalidArgument, yaml_location(file, at) + ": " + field + ": " + message, field};
}

// Looks a scalar up in a table of names; the error lists what is allowed.
template <typename T>
Result<T> one_of(const YamlNode& node, const std::string& file, const std::string& field, const auto& names) {
  if (const auto text = node.text()) {
    if (const auto value = names.parse(*text)) return *value;
  }
  std::string allowed;
  for (const auto& [value, name] : names.table) allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  return tl::unexpected(bad(file, node, field, "want one of " + allowed));
}

// A NaN in model.yaml (.nan) would make every value it touches NaN, and the
// model's scores with it, silently; an infinity only makes sense as an open
// clip bound (clip: [-.inf, 10]).
Result<double> number(const YamlNode& node, const std::string& file, const std::string& field,
                      bool infinity_allowed = false) {
  const auto value = node.number();
  if (!value) return tl::unexpected(bad(file, node, field, "want a number"));
  if (std::isnan(*value)) return tl::unexpected(bad(file, node, field, "want a number, not NaN"));
  if (std::isinf(*value) && !infinity_allowed) return tl::unexpected(bad(file, node, field, "want a finite number"));
  return *value;
}

Result<FeatureValue> default_for(const YamlNode& node, Kind kind, const std::string& file,
                                 const std::string& field) {
  if (kind == Kind::kNumeric) {
    auto n = number(node, file, field);
    if (!n) return tl::unexpected(n.error());
    return FeatureValue(*n);
  }
  if (kind == Kind::kId && node.is_scalar()) return FeatureValue(node.text().value_or(""));
  if (kind == Kind::kIdList && node.is_sequence()) {
    std::vector<std::string> ids;
    for (const auto& id : node.items()) {
      auto text = id.text();
      if (!text) return tl::unexpected(bad(file, id, field, "want a list of ids"));
      ids.push_back(std::move(*text));
    }
    return FeatureValue(ids);
  }
  return tl::unexpected(bad(file, node, field, kind == Kind::kId ? "want an id" : "want a list of ids"));
}

Status check_keys(const YamlNode& node, const std::string& file, const std::string& field,
                  const std::set<std::string>& allowed) {
  if (!node.is_map()) return tl::unexpected(bad(file, node, field, "want a map"));
  for (const auto& entry : node.entries()) {
    auto key = yaml_key(file, entry.first);
    if (!key) return tl::unexpected(key.error());
    if (!allowed.contains(*key)) return tl::unexpected(bad(file, entry.first, field + "." + *key, "unknown key"));
  }
  return {};
}

// A numeric feature's transform, mean/std and clip.
Status parse_numeric(const YamlNode& node, const std::string& file, const std::string& field, FeatureSpec& f) {
  if (node["table"]) return tl::unexpected(bad(file, node["table"], field + ".table", "numeric features have no table"));
  if (node["transform"]) {
    auto t = one_of<Transform>(node["transform"], file, field + ".transform", kTransformNames);
    if (!t) return tl::unexpected(t.error());
    f.transform = *t;
  }
  for (auto [key, target] : {std::pair{"mean", &f.mean}, std::pair{"std", &f.stddev}}) {
    if (!node[key]) continue;
    auto v = number(node[key], file, field + "." + key);
    if (!v) return tl::unexpected(v.error());
    *target = *v;
  }
  if (f.transform == Transform::kStandardize && !(f.stddev > 0)) {
    return tl::unexpected(bad(file, node, field + ".std", "standardize needs std > 0"));
  }
  if (const auto clip = node["clip"]) {
    if (!clip.is_sequence() || clip.size() != 2) {
      return tl::unexpected(bad(file, clip, field + ".clip", "want [low, high]"));
    }
    auto low = number(clip[0], file, field + ".clip", /*infinity_allowed=*/true);
    auto high = number(clip[1], file, field + ".clip", /*infinity_allowed=*/true);
    if (!low || !high) return tl::unexpected(low ? high.error() : low.error());
    if (*low > *high) return tl::unexpected(bad(file, clip, field + ".clip", "low is above high"));
    f.clip_low = *low;
    f.clip_high = *high;
  }
  return {};
}

// An id or id-list feature's table, max_len and default.
Status parse_sparse(const YamlNode& node, const ModelSpec& model, const std::string& file, const std::string& field,
                    FeatureSpec& f) {
  const auto table = node["table"].text();
  if (!table || !model.tables.contains(*table)) {
    return tl::unexpected(bad(file, node["table"] ? node["table"] : node, field + ".table",
                              "want one of the model's tables"));
  }
  f.table = *table;
  if (node["max_len"]) {
    if (f.kind != Kind::kIdList) {
      return tl::unexpected(bad(file, node["max_len"], field + ".max_len", "only id_list features have one"));
    }
    auto n = number(node["max_len"], file, field + ".max_len");
    if (!n || *n < 1 || *n != static_cast<double>(static_cast<unsigned>(*n))) {
      return tl::unexpected(bad(file, node["max_len"], field + ".max_len", "want a whole number >= 1"));
    }
    f.max_len = static_cast<unsigned>(*n);
  }
  f.default_value = f.kind == Kind::kId ? FeatureValue(std::string()) : FeatureValue(std::vector<std::string>{});
  return {};
}

Result<FeatureSpec> parse_feature(const YamlNode& node, const ModelSpec& model, const std::string& file,
                                  const std::string& field) {
  static const std::set<std::string> kKeys = {"name", "source", "kind", "table", "max_len", "transform",
                                              "mean", "std", "clip", "default", "view", "store_name"};
  if (auto checked = check_keys(node, file, field, kKeys); !checked) return tl::unexpected(checked.error());
  FeatureSpec f;
  if (!node["name"] || !node["name"].is_scalar() || node["name"].text().value_or("").empty()) {
    return tl::unexpected(bad(file, node, field + ".name", "required"));
  }
  f.name = node["name"].text().value_or("");
  for (auto [key, target] : {std::pair{"view", &f.view}, std::pair{"store_name", &f.store_name}}) {
    if (!node[key]) continue;
    if (!node[key].is_scalar() || node[key].text().value_or("").empty()) {
      return tl::unexpected(bad(file, node[key], field + "." + key, "want a name"));
    }
    *target = node[key].text().value_or("");
  }
  auto source = one_of<Source>(node["source"] ? node["source"] : node, file, field + ".source", kSourceNames);
  if (!source) return tl::unexpected(source.error());
  f.source = *source;
  auto kind = one_of<Kind>(node["kind"] ? node["kind"] : node, file, field + ".kind", kKindNames);
  if (!kind) return tl::unexpected(kind.error());
  f.kind = *kind;

  if (auto parsed = f.kind == Kind::kNumeric ? parse_numeric(node, file, field, f) : parse_sparse(node, model, file, field, f);
      !parsed) {
    return tl::unexpected(parsed.error());
  }
  if (node["default"]) {
    auto d = default_for(node["default"], f.kind, file, field + ".default");
    if (!d) return tl::unexpected(d.error());
    f.default_value = *d;
  }
  return f;
}

Result<std::string> name_at(const YamlNode& node, const std::string& file, const std::string& field,
                            const std::string& fallback) {
  if (!node) return fallback;
  if (!node.is_scalar() || node.text().value_or("").empty()) return tl::unexpected(bad(file, node, field, "want a name"));
  return node.text().value_or("");
}

Status parse_entity_mapping(const YamlNode& node, const std::string& file, const std::string& field,
                            EntityMapping& entity) {
  if (auto s = check_keys(node, file, field, {"view", "join_key", "join_key_type"}); !s) return s;
  auto view = name_at(node["view"], file, field + ".view", entity.view);
  auto join_key = name_at(node["join_key"], file, field + ".join_key", entity.join_key);
  if (!view || !join_key) return tl::unexpected(view ? join_key.error() : view.error());
  entity.view = *view;
  entity.join_key = *join_key;
  if (node["join_key_type"]) {
    constexpr auto kJoinKeyTypes = make_names<bool>({{false, "string"}, {true, "int64"}});  // is it int64?
    auto int64 = one_of<bool>(node["join_key_type"], file, field + ".join_key_type", kJoinKeyTypes);
    if (!int64) return tl::unexpected(int64.error());
    entity.int64_key = *int64;
  }
  return {};
}

Status parse_store_mapping(const YamlNode& node, const std::string& file, StoreMapping& store) {
  if (auto s = check_keys(node, file, "feature_store", {"project", "user", "item"}); !s) return s;
  auto project = name_at(node["project"], file, "feature_store.project", store.project);
  if (!project) return tl::unexpected(project.error());
  store.project = *project;
  for (auto [key, target] : {std::pair{"user", &store.user}, std::pair{"item", &store.item}}) {
    if (!node[key]) continue;
    if (auto s = parse_entity_mapping(node[key], file, std::string("feature_store.") + key, *target); !s) return s;
  }
  return {};
}

}  // namespace

std::vector<const FeatureSpec*> ModelSpec::dense_features() const {
  std::vector<const FeatureSpec*> out;
  for (const auto& f : features) {
    if (f.kind == Kind::kNumeric) out.push_back(&f);
  }
  return out;
}

std::vector<const FeatureSpec*> ModelSpec::sparse_features() const {
  std::vector<const FeatureSpec*> out;
  for (const auto& f : features) {
    if (f.kind != Kind::kNumeric) out.push_back(&f);
  }
  return out;
}

const FeatureSpec* ModelSpec::feature(std::string_view feature_name, Source source) const {
  const auto it = std::find_if(features.begin(), features.end(),
                               [&](const FeatureSpec& f) { return f.name == feature_name && f.source == source; });
  return it == features.end() ? nullptr : &*it;
}

Status same_feature_contract(const ModelSpec& served, const ModelSpec& candidate) {
  std::string differs;
  if (served.hash_seed != candidate.hash_seed) {
    differs = "hash_seed";
  } else if (served.tables != candidate.tables) {
    differs = "tables";
  } else if (!(served.store == candidate.store)) {
    differs = "store";
  } else if (served.features.size() != candidate.features.size()) {
    differs = "features (" + std::to_string(candidate.features.size()) + " against " + std::to_string(served.features.size()) + ")";
  } else {
    for (std::size_t i = 0; i < served.features.size() && differs.empty(); ++i) {
      if (!(served.features[i] == candidate.features[i])) differs = "features." + candidate.features[i].name;
    }
  }
  if (differs.empty()) return {};
  return make_error(Error::Code::kInvalidArgument,
                    "version " + candidate.version + " of " + candidate.name + " reads its features differently from version " +
                        served.version + " (" + differs + "): the feature store was set up for that one; a new feature "
                        "contract needs a restart",
                    differs.substr(0, differs.find(' ')));
}

TablePrecision tables_following(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
    case Precision::kBf16IfAvailable: return TablePrecision::kBf16;
    case Precision::kInt8:
    case Precision::kInt8IfAvailable: return TablePrecision::kInt8;
    case Precision::kFp32: break;
  }
  return TablePrecision::kFp32;
}

namespace {

// precision, embedding_precision, precision_max_drift and quantized_tables.
Status parse_precision_keys(const YamlNode& root, const std::string& file, ModelSpec& model) {
  if (root["precision"]) {
    auto precision = one_of<Precision>(root["precision"], file, "precision", kPrecisionNames);
    if (!precision) return tl::unexpected(precision.error());
    model.precision = *precision;
  }
  if (root["embedding_precision"]) {
    auto embedding = one_of<TablePrecision>(root["embedding_precision"], file, "embedding_precision", kTablePrecisionNames);
    if (!embedding) return tl::unexpected(embedding.error());
    model.embedding_precision = *embedding;
  }
  if (root["precision_max_drift"]) {
    auto drift = number(root["precision_max_drift"], file, "precision_max_drift");
    if (!drift) return tl::unexpected(drift.error());
    if (*drift <= 0) return tl::unexpected(bad(file, root["precision_max_drift"], "precision_max_drift", "want a number > 0"));
    model.precision_max_drift = *drift;
  }
  if (const auto quantized = root["quantized_tables"]) {
    if (!quantized.is_sequence()) return tl::unexpected(bad(file, quantized, "quantized_tables", "want a list of table names"));
    for (std::size_t i = 0; i < quantized.size(); ++i) {
      const std::string field = "quantized_tables[" + std::to_string(i) + "]";
      const std::string table = quantized[i].is_scalar() ? quantized[i].text().value_or("") : "";
      if (!model.tables.contains(table)) {
        return tl::unexpected(bad(file, quantized[i], field, "'" + table + "' is not among tables"));
      }
      if (std::find(model.quantized_tables.begin(), model.quantized_tables.end(), table) != model.quantized_tables.end()) {
        return tl::unexpected(bad(file, quantized[i], field, "'" + table + "' is listed twice"));
      }
      model.quantized_tables.push_back(table);
    }
    // The files' codes are embedding_precision's: written, and 8- or 4-bit.
    const auto bits = model.embedding_precision ? rowwise_bits(*model.embedding_precision) : 0;
    if (!model.quantized_tables.empty() && bits == 0) {
      return tl::unexpected(bad(file, quantized, "quantized_tables", "needs embedding_precision int8 or int4 (the shipped files' codes)"));
    }
  }
  return {};
}

}  // namespace

namespace {

Status parse_priority(const YamlNode& root, const std::string& file, ModelSpec& model) {
  const auto priority = root["priority"];
  if (!priority) return {};
  const auto level = priority.whole_number();
  if (!level || *level == 0) {
    return tl::unexpected(bad(file, priority, "priority", "want a priority level: a whole number, 1 the highest"));
  }
  model.priority = static_cast<std::size_t>(*level);
  return {};
}

}  // namespace

int rowwise_bits(TablePrecision p) { return p == TablePrecision::kInt8 ? 8 : p == TablePrecision::kInt4 ? 4 : 0; }

Result<ModelSpec> parse_model_spec(const std::string& yaml, const std::string& file) {
  auto parsed = parse_yaml(yaml, file);
  if (!parsed) return tl::unexpected(parsed.error());
  const YamlNode& root = *parsed;
  if (!root.is_map()) return make_error(Error::Code::kInvalidArgument, file + ": want a map", file);
  static const std::set<std::string> kKeys = {"name",   "version",       "hash_seed", "tables",
                                              "features", "output",      "feature_store", "precision", "embedding_precision", "quantized_tables", "precision_max_drift", "priority"};
  for (const auto& entry : root.entries()) {
    auto key = yaml_key(file, entry.first);
    if (!key) return tl::unexpected(key.error());
    if (!kKeys.contains(*key)) return tl::unexpected(bad(file, entry.first, *key, "unknown key"));
  }
  ModelSpec model;
  for (auto [key, target] : {std::pair{"name", &model.name}, std::pair{"version", &model.version}}) {
    if (!root[key] || !root[key].is_scalar() || root[key].text().value_or("").empty()) {
      return tl::unexpected(bad(file, root, key, "required"));
    }
    // Read as text: a version like 01 or 1.10 must not become a number.
    *target = root[key].text().value_or("");
  }
  if (root["hash_seed"]) {
    const auto seed = root["hash_seed"].whole_number();
    if (!seed) return tl::unexpected(bad(file, root["hash_seed"], "hash_seed", "want a whole number"));
    model.hash_seed = *seed;
  }
  const auto tables = root["tables"];
  if (tables && !tables.is_map()) return tl::unexpected(bad(file, tables, "tables", "want a map of name: rows"));
  if (tables) {
    for (const auto& entry : tables.entries()) {
      auto key = yaml_key(file, entry.first);
      if (!key) return tl::unexpected(key.error());
      const std::string& name = *key;
      const std::uint64_t rows = entry.second.whole_number().value_or(0);
      if (rows == 0) return tl::unexpected(bad(file, entry.second, "tables." + name, "want rows >= 1"));
      model.tables[name] = rows;
    }
  }
  const auto features = root["features"];
  if (!features || !features.is_sequence() || features.size() == 0) {
    return tl::unexpected(bad(file, features ? features : root, "features", "want a non-empty list"));
  }
  for (std::size_t i = 0; i < features.size(); ++i) {
    const std::string field = "features[" + std::to_string(i) + "]";
    auto f = parse_feature(features[i], model, file, field);
    if (!f) return tl::unexpected(f.error());
    if (model.feature(f->name, f->source)) {
      return tl::unexpected(bad(file, features[i], field + ".name",
                                "'" + f->name + "' is declared twice for source " + std::string(to_string(f->source))));
    }
    model.features.push_back(std::move(*f));
  }
  if (root["feature_store"]) {
    if (auto s = parse_store_mapping(root["feature_store"], file, model.store); !s) return tl::unexpected(s.error());
  }
  if (auto s = parse_precision_keys(root, file, model); !s) return tl::unexpected(s.error());
  if (auto s = parse_priority(root, file, model); !s) return tl::unexpected(s.error());
  return model;
}

Result<ModelSpec> read_model_spec(const std::string& model_dir) {
  const std::string file = model_dir + "/model.yaml";
  auto text = read_text_file(file);
  if (!text) return tl::unexpected(text.error());
  return parse_model_spec(*text, file);
}

}  // namespace numaserve::features
