#include "features/extract.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

namespace numaserve::features {
namespace {

const char* type_name(const FeatureValue& v) {
  return std::holds_alternative<double>(v) ? "a number" : std::holds_alternative<std::string>(v) ? "a string" : "a list";
}

Error bad_field(const std::string& field, const std::string& message) {
  return Error{Error::Code::kInvalidArgument, field + ": " + message, field};
}

// The value a feature takes for one entity, and where it came from (for errors).
struct Found {
  FeatureValue value;
  std::string field;
};

// `features_path` is where the request carries the features ("user.features",
// "items[3].features", "context"); `entity_path` where the entity is.
Found lookup(const FeatureSpec& spec, const Features& inline_features, const Features* stored,
             const std::string& entity_id, const std::string& entity_path, const std::string& features_path,
             const std::string& store_name) {
  if (auto it = inline_features.find(spec.name); it != inline_features.end()) {
    return {it->second, features_path + "." + spec.name};
  }
  if (stored != nullptr) {
    if (auto it = stored->find(spec.name); it != stored->end()) {
      return {it->second, "feature store " + store_name + " '" + entity_id + "' " + spec.name};
    }
  }
  if (spec.name == "id" && !entity_id.empty()) return {FeatureValue(entity_id), entity_path + ".id"};
  return {spec.default_value, features_path + "." + spec.name + " (default)"};
}

Result<float> numeric(const FeatureSpec& spec, const Found& found) {
  const double* raw = std::get_if<double>(&found.value);
  if (raw == nullptr) return tl::unexpected(bad_field(found.field, std::string("want a number, got ") + type_name(found.value)));
  double x = *raw;
  if (!std::isfinite(x)) return tl::unexpected(bad_field(found.field, "want a finite number"));
  switch (spec.transform) {
    case Transform::kNone: break;
    case Transform::kLog1p:
      if (x <= -1) return tl::unexpected(bad_field(found.field, "log1p needs a value above -1, got " + std::to_string(x)));
      x = std::log1p(x);
      break;
    case Transform::kStandardize: x = (x - spec.mean) / spec.stddev; break;
  }
  if (spec.clip_low) x = std::clamp(x, *spec.clip_low, *spec.clip_high);
  return static_cast<float>(x);
}

Result<std::vector<std::int64_t>> ids(const FeatureSpec& spec, const Found& found, std::uint64_t seed,
                                      std::uint64_t rows) {
  std::vector<std::int64_t> out;
  if (spec.kind == Kind::kId) {
    if (const auto* id = std::get_if<std::string>(&found.value)) {
      out.push_back(bucket(*id, seed, rows));
    } else if (const auto* n = std::get_if<double>(&found.value); n && *n == std::floor(*n) && std::isfinite(*n)) {
      out.push_back(bucket(std::to_string(static_cast<long long>(*n)), seed, rows));  // 42 hashes as "42"
    } else {
      return tl::unexpected(bad_field(found.field, std::string("want an id, got ") + type_name(found.value)));
    }
    return out;
  }
  const auto* list = std::get_if<std::vector<std::string>>(&found.value);
  if (list == nullptr) return tl::unexpected(bad_field(found.field, std::string("want a list of ids, got ") + type_name(found.value)));
  const std::size_t keep = spec.max_len == 0 ? list->size() : std::min<std::size_t>(list->size(), spec.max_len);
  for (std::size_t i = 0; i < keep; ++i) out.push_back(bucket((*list)[i], seed, rows));
  return out;
}

// Rejects request features the model does not read: a typo would otherwise
// silently fall back to the default.
Status check_known(const ModelSpec& model, const Features& features, Source source, const std::string& features_path) {
  for (const auto& [name, value] : features) {
    if (model.feature(name, source) == nullptr) {
      return tl::unexpected(bad_field(features_path + "." + name,
                                      "model " + model.name + " has no " + to_string(source) + " feature of that name"));
    }
  }
  return {};
}

}  // namespace

std::uint64_t hash_id(std::string_view id, std::uint64_t seed) { return XXH64(id.data(), id.size(), seed); }

std::int64_t bucket(std::string_view id, std::uint64_t seed, std::uint64_t rows) {
  return static_cast<std::int64_t>(hash_id(id, seed) % rows);
}

StoredFeatures query(const Request& request, const FeatureStore& store) {
  StoredFeatures stored;
  stored.user = request.user.id.empty() ? nullptr : store.user(request.user.id);
  stored.items.reserve(request.items.size());
  for (const auto& item : request.items) stored.items.push_back(store.item(item.id));
  return stored;
}

Result<Batch> extract(const ModelSpec& model, const Request& request, const FeatureStore& store) {
  return extract(model, request, query(request, store));
}

Result<Batch> extract(const ModelSpec& model, const Request& request, const StoredFeatures& stored) {
  if (auto s = check_known(model, request.user.features, Source::kUser, "user.features"); !s) {
    return tl::unexpected(s.error());
  }
  if (auto s = check_known(model, request.context, Source::kContext, "context"); !s) return tl::unexpected(s.error());
  for (std::size_t i = 0; i < request.items.size(); ++i) {
    const std::string path = "items[" + std::to_string(i) + "].features";
    if (auto s = check_known(model, request.items[i].features, Source::kItem, path); !s) {
      return tl::unexpected(s.error());
    }
  }

  const std::size_t n = request.items.size();
  const auto dense = model.dense_features();
  const auto sparse = model.sparse_features();
  Batch batch;
  batch.rows = n;
  batch.dense_width = dense.size();
  batch.dense.resize(n * dense.size());
  batch.bags.resize(sparse.size());

  if (stored.items.size() != n) {
    return make_error(Error::Code::kInternal, "stored features for " + std::to_string(stored.items.size()) +
                                                  " items, the request has " + std::to_string(n));
  }
  const Features* stored_user = stored.user;
  const auto& stored_items = stored.items;

  // The value of `spec` for row i; user and context features do not depend on i.
  auto find = [&](const FeatureSpec& spec, std::size_t i) -> Found {
    switch (spec.source) {
      case Source::kUser:
        return lookup(spec, request.user.features, stored_user, request.user.id, "user", "user.features", "user");
      case Source::kContext: return lookup(spec, request.context, nullptr, {}, "context", "context", "");
      case Source::kItem: {
        const std::string item = "items[" + std::to_string(i) + "]";
        return lookup(spec, request.items[i].features, stored_items[i], request.items[i].id, item, item + ".features",
                      "item");
      }
    }
    return {};
  };

  for (std::size_t c = 0; c < dense.size(); ++c) {
    const FeatureSpec& spec = *dense[c];
    if (spec.source != Source::kItem) {  // once per request
      auto v = numeric(spec, find(spec, 0));
      if (!v) return tl::unexpected(v.error());
      for (std::size_t i = 0; i < n; ++i) batch.dense[i * dense.size() + c] = *v;
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) {
      auto v = numeric(spec, find(spec, i));
      if (!v) return tl::unexpected(v.error());
      batch.dense[i * dense.size() + c] = *v;
    }
  }
  for (std::size_t b = 0; b < sparse.size(); ++b) {
    const FeatureSpec& spec = *sparse[b];
    const std::uint64_t rows = model.tables.at(spec.table);
    Bag& bag = batch.bags[b];
    bag.offsets.reserve(n);
    std::vector<std::int64_t> shared;
    if (spec.source != Source::kItem) {  // once per request
      auto v = ids(spec, find(spec, 0), model.hash_seed, rows);
      if (!v) return tl::unexpected(v.error());
      shared = std::move(*v);
    }
    for (std::size_t i = 0; i < n; ++i) {
      bag.offsets.push_back(static_cast<std::int64_t>(bag.indices.size()));
      if (spec.source != Source::kItem) {
        bag.indices.insert(bag.indices.end(), shared.begin(), shared.end());
        continue;
      }
      auto v = ids(spec, find(spec, i), model.hash_seed, rows);
      if (!v) return tl::unexpected(v.error());
      bag.indices.insert(bag.indices.end(), v->begin(), v->end());
    }
  }
  return batch;
}

Batch concat(const std::vector<const Batch*>& batches) {
  Batch out;
  if (batches.empty()) return out;
  out.dense_width = batches.front()->dense_width;
  out.bags.resize(batches.front()->bags.size());
  for (const Batch* b : batches) {
    out.rows += b->rows;
    out.dense.insert(out.dense.end(), b->dense.begin(), b->dense.end());
    for (std::size_t k = 0; k < out.bags.size(); ++k) {
      auto& bag = out.bags[k];
      const auto base = static_cast<std::int64_t>(bag.indices.size());
      for (std::int64_t offset : b->bags[k].offsets) bag.offsets.push_back(base + offset);
      bag.indices.insert(bag.indices.end(), b->bags[k].indices.begin(), b->bags[k].indices.end());
    }
  }
  return out;
}

}  // namespace numaserve::features
