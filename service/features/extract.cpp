#include "features/extract.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

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

// One of the model's inputs and where it goes in the batch.
struct Column {
  std::size_t at;  // dense: the column; sparse: the bag
  const FeatureSpec* spec;
  std::uint64_t table_rows = 0;  // sparse: its table's
};

// The model's inputs by source (the user's and context's, shared by every
// row, and the item's), each in ModelSpec order.
struct Columns {
  std::vector<Column> shared_dense, shared_bags, item_dense, item_bags;

  explicit Columns(const ModelSpec& model) {
    const auto dense = model.dense_features();
    const auto sparse = model.sparse_features();
    for (std::size_t c = 0; c < dense.size(); ++c) {
      (dense[c]->source == Source::kItem ? item_dense : shared_dense).push_back({c, dense[c]});
    }
    for (std::size_t b = 0; b < sparse.size(); ++b) {
      (sparse[b]->source == Source::kItem ? item_bags : shared_bags)
          .push_back({b, sparse[b], model.tables.at(sparse[b]->table)});
    }
  }
};

// The refusal extraction reports: the first in the feature contract's
// order (dense columns, then bags, each in ModelSpec order and over the
// rows in turn), which the Python package reports too. Rows are filled one
// by one, so a later row's refusal may be found before an earlier column's.
class FirstRefusal {
 public:
  void offer(bool sparse, std::size_t at, std::size_t row, const Error& error) {
    const Key key{sparse, at, row};
    if (error_ && !(key < key_)) return;
    key_ = key;
    error_ = error;
  }
  Status status() const {
    if (error_) return tl::unexpected(*error_);
    return {};
  }

 private:
  using Key = std::tuple<bool, std::size_t, std::size_t>;
  Key key_;
  std::optional<Error> error_;
};

// The user's and the context's columns: extracted once, the same on every row.
void fill_shared(const ModelSpec& model, const Columns& columns, const Rows& rows, Batch& batch,
                 FirstRefusal& refusal) {
  const std::size_t n = rows.count(), width = batch.dense_width;
  for (const Column& dense : columns.shared_dense) {
    auto v = numeric(*dense.spec, rows.find(*dense.spec, 0), {dense.spec->source});
    if (!v) {
      refusal.offer(false, dense.at, 0, v.error());
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) batch.dense[i * width + dense.at] = *v;
  }
  for (const Column& sparse : columns.shared_bags) {
    Bag& bag = batch.bags[sparse.at];
    if (auto s = append_ids(*sparse.spec, rows.find(*sparse.spec, 0), {sparse.spec->source}, model.hash_seed,
                            sparse.table_rows, bag.indices);
        !s) {
      refusal.offer(true, sparse.at, 0, s.error());
      continue;
    }
    const std::size_t ids = bag.indices.size(), total = n * ids;
    bag.offsets.resize(n);
    for (std::size_t i = 0; i < n; ++i) bag.offsets[i] = static_cast<std::int64_t>(i * ids);
    bag.indices.resize(total);
    // The rows written so far copied after themselves: a few long copies
    // where one per row (a user's 20 recent items on 200 rows) was 200 calls.
    for (std::size_t filled = ids; filled < total; filled += std::min(filled, total - filled)) {
      std::copy_n(bag.indices.data(), std::min(filled, total - filled), bag.indices.data() + filled);
    }
  }
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

// The item columns, row by row: a cached row's record is read in one visit
// (one or two cache lines) rather than once per column; an item the cache
// does not hold is extracted afresh.
void fill_items(const ModelSpec& model, const Columns& columns, const Rows& rows, Batch& batch,
                FirstRefusal& refusal) {
  const std::size_t n = rows.count(), width = batch.dense_width;
  // Each bag sized once, cached rows from their records and the others at
  // their longest: growing a list bag by doubling copied it several times.
  for (const Column& sparse : columns.item_bags) {
    std::size_t size = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto row = rows.cached(i);
      size += row >= 0 ? rows.cache->ids(row, sparse.at).size() : std::max<std::size_t>(sparse.spec->max_len, 1);
    }
    batch.bags[sparse.at].indices.reserve(size);
    batch.bags[sparse.at].offsets.resize(n);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto row = rows.cached(i);
    for (const Column& dense : columns.item_dense) {
      if (row >= 0) {
        batch.dense[i * width + dense.at] = rows.cache->dense_value(row, dense.at);
        continue;
      }
      auto v = numeric(*dense.spec, rows.find(*dense.spec, i), {Source::kItem, i});
      if (!v) {
        refusal.offer(false, dense.at, i, v.error());
        continue;
      }
      batch.dense[i * width + dense.at] = *v;
    }
    for (const Column& sparse : columns.item_bags) {
      Bag& bag = batch.bags[sparse.at];
      bag.offsets[i] = static_cast<std::int64_t>(bag.indices.size());
      if (row >= 0) {
        append(bag.indices, rows.cache->ids(row, sparse.at));
        continue;
      }
      if (auto s = append_ids(*sparse.spec, rows.find(*sparse.spec, i), {Source::kItem, i}, model.hash_seed,
                              sparse.table_rows, bag.indices);
          !s) {
        refusal.offer(true, sparse.at, i, s.error());
      }
    }
  }
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
  const Columns columns(model);
  Batch batch;
  batch.rows = n;
  batch.dense_width = columns.shared_dense.size() + columns.item_dense.size();
  batch.dense.resize(n * batch.dense_width);
  batch.bags.resize(columns.shared_bags.size() + columns.item_bags.size());
  const Rows rows{request, stored, cache};
  FirstRefusal refusal;
  fill_shared(model, columns, rows, batch, refusal);
  fill_items(model, columns, rows, batch, refusal);
  if (auto s = refusal.status(); !s) return tl::unexpected(s.error());
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
