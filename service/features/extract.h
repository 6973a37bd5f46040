#pragma once
// Feature extraction: a request (one user, a context, N candidate items) and
// the feature store in, the model's input batch out — in one pass, with user
// and context features computed once and shared by every row.

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "features/features.h"
#include "features/model_spec.h"

namespace numaserve::features {

struct Request {
  Entity user;
  Features context;
  std::vector<Entity> items;
};

// One embedding-bag input: row r's ids are indices[offsets[r] .. offsets[r+1]).
struct Bag {
  std::vector<std::int64_t> indices;
  std::vector<std::int64_t> offsets;  // one per row
};

struct Batch {
  std::size_t rows = 0;
  std::size_t dense_width = 0;
  std::vector<float> dense;  // rows x dense_width, row-major, ModelSpec::dense_features() order
  std::vector<Bag> bags;     // ModelSpec::sparse_features() order
};

// XXH64 of the id's UTF-8 bytes; the contract in model_spec.h.
std::uint64_t hash_id(std::string_view id, std::uint64_t seed);
std::int64_t bucket(std::string_view id, std::uint64_t seed, std::uint64_t rows);

// What the feature-query stage found for one request (feature_store/):
// the stored entities of its user and items (nullptr where none), and,
// with a model's ItemCache, the rows of items found there instead.
struct StoredFeatures {
  const Features* user = nullptr;
  std::vector<const Features*> items;        // one per request item
  std::vector<std::int64_t> cached_rows;     // with a cache: one per item, -1 where `items` applies
};

// The store's items extracted once, at start, for one model: what extract()
// computes for an item that carries no inline features, looked up instead
// of recomputed per request (the hashes, transforms and map lookups of the
// item features are most of extraction's cost). Built from a store that
// lists its items; a store value the model cannot read fails the build,
// naming the item, so it is found at start rather than per request.
//
// With a networked store it is filled as requests go instead (empty(),
// put()): each item a request fetched is kept, extracted, until `expires`,
// so the next request asks the store for its user only. Such a cache is
// one worker's: put() and find_rows() are not thread-safe.
class ItemCache {
 public:
  using Clock = std::chrono::steady_clock;
  // `for_each_item` visits every stored item.
  static Result<ItemCache> build(const ModelSpec& model, const std::function<void(const EntityVisitor&)>& for_each_item);
  // An empty cache for `model` holding at most `max_rows` rows (when full,
  // every row goes: a cache, not a store).
  static ItemCache empty(const ModelSpec& model, std::size_t max_rows);
  std::size_t items() const { return item_ids_.size(); }

  // Sets rows[i] to the row of request item i, for items without inline
  // features that the cache holds unexpired at `now` (others keep -1).
  void find_rows(const Request& request, std::vector<std::int64_t>& rows, Clock::time_point now = {}) const;
  // Keeps row `i` of `batch` (extracted for `model`, the cache's) as item `id`'s until `expires`.
  void put(const std::string& id, const Batch& batch, std::size_t i, Clock::time_point expires);
  // Counts the times the cache was emptied: rows found before a change are
  // not this cache's any more.
  std::uint64_t generation() const { return generation_; }

  // A cached row's value of the model's dense feature `column`, and its ids
  // of sparse feature `bag` (in ModelSpec::dense_features() and
  // sparse_features() order; item features only).
  float dense_value(std::int64_t row, std::size_t column) const {
    return dense_[static_cast<std::size_t>(row) * dense_width_ + static_cast<std::size_t>(dense_slot_[column])];
  }
  std::span<const std::int64_t> ids(std::int64_t row, std::size_t bag) const {
    const std::size_t at = static_cast<std::size_t>(row) * sparse_width_ + static_cast<std::size_t>(sparse_slot_[bag]);
    return {ids_.data() + id_starts_[at], ids_.data() + id_starts_[at + 1]};
  }
  // Starts loading a row's embedding ids, all bags together, into the cache.
  void prefetch_ids(std::int64_t row) const {
    if (sparse_width_ == 0) return;
    const std::int64_t* ids = ids_.data() + id_starts_[static_cast<std::size_t>(row) * sparse_width_];
    for (std::size_t line = 0; line < 4; ++line) __builtin_prefetch(ids + 8 * line);
  }

 private:
  static ItemCache with_slots(const ModelSpec& model);
  // The first slot from `at` on that holds `hash`, or the empty slot ending the run.
  std::size_t next_match(std::uint64_t hash, std::size_t at) const;
  void index_ids();
  void index(std::uint32_t row);  // into slots_, which has room
  void clear();
  std::vector<int> dense_slot_;   // per dense feature: its column here, -1 if not an item feature
  std::vector<int> sparse_slot_;  // per sparse feature: likewise
  std::size_t dense_width_ = 0, sparse_width_ = 0;
  // Item id -> row: open addressing in one flat array, so a request's 200
  // ids can be hashed and their slots prefetched before the first is probed
  // — one trip to memory for all of them instead of 200 in a row. In the
  // server every forward evicts the table, so these misses were most of the
  // query stage.
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t row = kNoRow;
  };
  static constexpr std::uint32_t kNoRow = ~std::uint32_t{0};
  std::vector<Slot> slots_;               // a power of two, at most half full
  std::vector<std::string> item_ids_;     // by row
  std::vector<float> dense_;              // rows x dense_width_
  std::vector<std::uint32_t> id_starts_;  // rows x sparse_width_, + 1
  std::vector<std::int64_t> ids_;         // the rows' embedding ids
  // Filled as requests go (empty()): each row's expiry, and the bound.
  std::vector<Clock::time_point> expires_;
  std::size_t max_rows_ = 0;
  std::uint64_t generation_ = 0;
};

// Errors name the offending field as a client would write it:
// "items[3].features.price: want a number, got a list". Items found in
// `cache` (stored.cached_rows) are copied from it: pass the cache the query used.
Result<Batch> extract(const ModelSpec& model, const Request& request, const StoredFeatures& stored,
                      const ItemCache* cache = nullptr);
// Rows of several batches of one model, in order, as one batch: what the
// dynamic batcher runs. Offsets are rebased onto the joined indices.
Batch concat(const std::vector<const Batch*>& batches);

}  // namespace numaserve::features
