#include "features/extract.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace numaserve::features {
namespace {

const char* type_name(const FeatureValue& v) {
  return std::holds_alternative<double>(v) ? "a number" : std::holds_alternative<std::string>(v) ? "a string" : "a list";
}

Error bad_field(const std::string& field, const std::string& message) {
  return Error{Error::Code::kInvalidArgument, field + ": " + message, field};
}

// Where a feature's value was found. Extraction runs per item and feature,
// so the value is borrowed, never copied, and the field name a client would
// see is only spelled out when there is an error to report.
enum class Origin { kInline, kStore, kEntityId, kDefault };

struct Found {
  const FeatureValue* value = nullptr;  // kEntityId: nullptr, the id is `entity_id`
  const std::string* entity_id = nullptr;
  Origin origin = Origin::kDefault;
};

// The entity a row's feature belongs to: the user, the context or item i.
struct Where {
  Source source;
  std::size_t item = 0;
};

std::string field_of(const FeatureSpec& spec, const Found& found, const Where& where) {
  const std::string entity = where.source == Source::kUser      ? "user"
                             : where.source == Source::kContext ? ""
                                                                : "items[" + std::to_string(where.item) + "]";
  const std::string features = entity.empty() ? "context" : entity + ".features";
  switch (found.origin) {
    case Origin::kInline: return features + "." + spec.name;
    case Origin::kStore:
      return std::string("feature store ") + (where.source == Source::kUser ? "user" : "item") + " '" +
             *found.entity_id + "' " + spec.name;
    case Origin::kEntityId: return entity + ".id";
    case Origin::kDefault: break;
  }
  return features + "." + spec.name + " (default)";
}

Found lookup(const FeatureSpec& spec, const Features& inline_features, const Features* stored,
             const std::string* entity_id) {
  if (auto it = inline_features.find(spec.name); it != inline_features.end()) return {&it->second, entity_id, Origin::kInline};
  if (stored != nullptr) {
    if (auto it = stored->find(spec.name); it != stored->end()) return {&it->second, entity_id, Origin::kStore};
  }
  if (spec.name == "id" && entity_id != nullptr && !entity_id->empty()) return {nullptr, entity_id, Origin::kEntityId};
  return {&spec.default_value, entity_id, Origin::kDefault};
}

tl::unexpected<Error> bad_value(const FeatureSpec& spec, const Found& found, const Where& where, const std::string& message) {
  return tl::unexpected(bad_field(field_of(spec, found, where), message));
}

Result<float> numeric(const FeatureSpec& spec, const Found& found, const Where& where) {
  const double* raw = found.value ? std::get_if<double>(found.value) : nullptr;
  if (raw == nullptr) {
    return bad_value(spec, found, where,
                     std::string("want a number, got ") + (found.value ? type_name(*found.value) : "an id"));
  }
  double x = *raw;
  if (!std::isfinite(x)) return bad_value(spec, found, where, "want a finite number");
  switch (spec.transform) {
    case Transform::kNone: break;
    case Transform::kLog1p:
      if (x <= -1) return bad_value(spec, found, where, "log1p needs a value above -1, got " + std::to_string(x));
      x = std::log1p(x);
      break;
    case Transform::kStandardize: x = (x - spec.mean) / spec.stddev; break;
  }
  if (spec.clip_low) x = std::clamp(x, *spec.clip_low, *spec.clip_high);
  return static_cast<float>(x);
}

// Appends the feature's embedding rows to `out`.
// 2^53: every whole number below it is a double exactly, and a JSON integer
// at or above it may have been rounded to another on its way in.
constexpr double kExactIdLimit = 9007199254740992.0;

Status append_ids(const FeatureSpec& spec, const Found& found, const Where& where, std::uint64_t seed,
                  std::uint64_t rows, std::vector<std::int64_t>& out) {
  if (found.origin == Origin::kEntityId) {
    out.push_back(bucket(*found.entity_id, seed, rows));
    return {};
  }
  const FeatureValue& value = *found.value;
  if (spec.kind == Kind::kId) {
    if (const auto* id = std::get_if<std::string>(&value)) {
      out.push_back(bucket(*id, seed, rows));
    } else if (const auto* n = std::get_if<double>(&value); n && *n == std::floor(*n) && std::isfinite(*n)) {
      // A JSON number arrives as a double, which from 2^53 on may not hold
      // the digits the client sent (and past 2^63 has no int64): such an id
      // would hash as some other id, so it must come as a string.
      if (std::fabs(*n) >= kExactIdLimit) {
        return bad_value(spec, found, where, "want an id: a whole number of 2^53 or more loses digits as a JSON number; send it as a string");
      }
      out.push_back(bucket(std::to_string(static_cast<long long>(*n)), seed, rows));  // 42 hashes as "42"
    } else {
      return bad_value(spec, found, where, std::string("want an id, got ") + type_name(value));
    }
    return {};
  }
  const auto* list = std::get_if<std::vector<std::string>>(&value);
  if (list == nullptr) return bad_value(spec, found, where, std::string("want a list of ids, got ") + type_name(value));
  const std::size_t keep = spec.max_len == 0 ? list->size() : std::min<std::size_t>(list->size(), spec.max_len);
  for (std::size_t i = 0; i < keep; ++i) out.push_back(bucket((*list)[i], seed, rows));
  return {};
}

// Rejects request features the model does not read: a typo would otherwise
// silently fall back to the default.
Status check_known(const ModelSpec& model, const Features& features, Source source, const std::string& features_path) {
  for (const auto& [name, value] : features) {
    if (model.feature(name, source) == nullptr) {
      return tl::unexpected(bad_field(features_path + "." + name,
                                      "model " + model.name + " has no " + std::string(to_string(source)) + " feature of that name"));
    }
  }
  return {};
}

}  // namespace

std::uint64_t hash_id(std::string_view id, std::uint64_t seed) { return XXH64(id.data(), id.size(), seed); }

std::int64_t bucket(std::string_view id, std::uint64_t seed, std::uint64_t rows) {
  return static_cast<std::int64_t>(hash_id(id, seed) % rows);
}

namespace {

// Inline features must be ones the model reads, from the right source.
Status check_request(const ModelSpec& model, const Request& request) {
  if (auto s = check_known(model, request.user.features, Source::kUser, "user.features"); !s) return s;
  if (auto s = check_known(model, request.context, Source::kContext, "context"); !s) return s;
  for (std::size_t i = 0; i < request.items.size(); ++i) {
    if (request.items[i].features.empty()) continue;  // most items: no path string to build
    const std::string path = "items[" + std::to_string(i) + "].features";
    if (auto s = check_known(model, request.items[i].features, Source::kItem, path); !s) return s;
  }
  return {};
}

// Where row i's features come from: the request, the store's entries
// the query found, or the item cache's rows.
struct Rows {
  const Request& request;
  const StoredFeatures& stored;
  const ItemCache* cache;

  std::size_t count() const { return request.items.size(); }
  std::int64_t cached(std::size_t i) const { return stored.cached_rows.empty() ? -1 : stored.cached_rows[i]; }
  // The value of `spec` for row i; user and context features do not depend on i.
  Found find(const FeatureSpec& spec, std::size_t i) const {
    switch (spec.source) {
      case Source::kUser: return lookup(spec, request.user.features, stored.user, &request.user.id);
      case Source::kContext: return lookup(spec, request.context, nullptr, nullptr);
      case Source::kItem: return lookup(spec, request.items[i].features, stored.items[i], &request.items[i].id);
    }
    return {};
  }
};

Status fill_dense(const std::vector<const FeatureSpec*>& dense, const Rows& rows, Batch& batch) {
  const std::size_t n = rows.count();
  for (std::size_t c = 0; c < dense.size(); ++c) {
    const FeatureSpec& spec = *dense[c];
    if (spec.source != Source::kItem) {  // once per request
      auto v = numeric(spec, rows.find(spec, 0), {spec.source});
      if (!v) return tl::unexpected(v.error());
      for (std::size_t i = 0; i < n; ++i) batch.dense[i * dense.size() + c] = *v;
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (const auto row = rows.cached(i); row >= 0) {
        batch.dense[i * dense.size() + c] = rows.cache->dense_value(row, c);
        continue;
      }
      auto v = numeric(spec, rows.find(spec, i), {Source::kItem, i});
      if (!v) return tl::unexpected(v.error());
      batch.dense[i * dense.size() + c] = *v;
    }
  }
  return {};
}

// Appends `ids` to `out`, which has room for them: one id (most item bags)
// is a store, where a call to memmove per row cost more than the copy.
void append(std::vector<std::int64_t>& out, std::span<const std::int64_t> ids) {
  if (ids.size() == 1) {
    out.push_back(ids.front());
  } else {
    out.insert(out.end(), ids.begin(), ids.end());
  }
}

Status fill_bags(const ModelSpec& model, const std::vector<const FeatureSpec*>& sparse, const Rows& rows,
                 Batch& batch) {
  const std::size_t n = rows.count();
  for (std::size_t b = 0; b < sparse.size(); ++b) {
    const FeatureSpec& spec = *sparse[b];
    const std::uint64_t table_rows = model.tables.at(spec.table);
    Bag& bag = batch.bags[b];
    bag.offsets.resize(n);
    if (spec.source != Source::kItem) {  // once per request, repeated on every row
      if (auto s = append_ids(spec, rows.find(spec, 0), {spec.source}, model.hash_seed, table_rows, bag.indices); !s) return s;
      const std::size_t width = bag.indices.size();
      bag.indices.resize(n * width);
      for (std::size_t i = 0; i < n; ++i) bag.offsets[i] = static_cast<std::int64_t>(i * width);
      if (width == 1) {
        std::fill(bag.indices.begin() + 1, bag.indices.end(), bag.indices.front());
      } else {
        for (std::size_t i = 1; i < n; ++i) std::copy_n(bag.indices.data(), width, bag.indices.data() + i * width);
      }
      continue;
    }
    // Sized once from the cached rows (the rest grow it if they must):
    // growing a list bag by doubling copied it several times a request.
    std::size_t size = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto row = rows.cached(i);
      size += row >= 0 ? rows.cache->ids(row, b).size() : std::max<std::size_t>(spec.max_len, 1);
    }
    bag.indices.reserve(size);
    for (std::size_t i = 0; i < n; ++i) {
      bag.offsets[i] = static_cast<std::int64_t>(bag.indices.size());
      if (const auto row = rows.cached(i); row >= 0) {
        append(bag.indices, rows.cache->ids(row, b));
        continue;
      }
      if (auto s = append_ids(spec, rows.find(spec, i), {Source::kItem, i}, model.hash_seed, table_rows, bag.indices);
          !s) {
        return s;
      }
    }
  }
  return {};
}

}  // namespace

Result<Batch> extract(const ModelSpec& model, const Request& request, const StoredFeatures& stored,
                      const ItemCache* cache) {
  if (auto s = check_request(model, request); !s) return tl::unexpected(s.error());
  const std::size_t n = request.items.size();
  if (stored.items.size() != n) {
    return make_error(Error::Code::kInternal, "stored features for " + std::to_string(stored.items.size()) +
                                                  " items, the request has " + std::to_string(n));
  }
  const auto& cached = stored.cached_rows;
  if (!cached.empty() && (cache == nullptr || cached.size() != n)) {
    return make_error(Error::Code::kInternal, "cached rows without the item cache the query used");
  }
  // Each cached row's embedding ids on their way before the copies need
  // them (their offsets were prefetched by the query).
  for (const std::int64_t row : cached) {
    if (row >= 0) cache->prefetch(row);
  }
  const auto dense = model.dense_features();
  const auto sparse = model.sparse_features();
  Batch batch;
  batch.rows = n;
  batch.dense_width = dense.size();
  batch.dense.resize(n * dense.size());
  batch.bags.resize(sparse.size());
  const Rows rows{request, stored, cache};
  if (auto s = fill_dense(dense, rows, batch); !s) return tl::unexpected(s.error());
  if (auto s = fill_bags(model, sparse, rows, batch); !s) return tl::unexpected(s.error());
  return batch;
}

Batch concat(const std::vector<const Batch*>& batches) {
  Batch out;
  if (batches.empty()) return out;
  out.dense_width = batches.front()->dense_width;
  out.bags.resize(batches.front()->bags.size());
  // Sized once: growing by each part's insert copied the joined rows again
  // at every doubling, and freshly grown buffers fault their pages in.
  std::size_t dense = 0;
  std::vector<std::size_t> indices(out.bags.size()), offsets(out.bags.size());
  for (const Batch* b : batches) {
    dense += b->dense.size();
    for (std::size_t k = 0; k < out.bags.size(); ++k) {
      indices[k] += b->bags[k].indices.size();
      offsets[k] += b->bags[k].offsets.size();
    }
  }
  out.dense.reserve(dense);
  for (std::size_t k = 0; k < out.bags.size(); ++k) {
    out.bags[k].indices.reserve(indices[k]);
    out.bags[k].offsets.reserve(offsets[k]);
  }
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
