#pragma once
// Feature extraction: a request (one user, a context, N candidate items) and
// the feature store in, the model's input batch out — in one pass, with user
// and context features computed once and shared by every row.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "features/features.h"
#include "features/model_spec.h"
#include "numa/huge_pages.h"

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
  // An empty cache for `model` holding at most `max_rows` rows. Rows that
  // expired are dropped each time the rows have doubled since the last such
  // pass, so a cache refreshed over and over holds at most twice the rows
  // unexpired at once, not every refresh since it began; one more than half
  // full of unexpired rows is emptied (a cache, not a store).
  static ItemCache empty(const ModelSpec& model, std::size_t max_rows);
  std::size_t items() const { return records_at_.size(); }

  // Sets rows[i] to the row of request item i, for items without inline
  // features that the cache holds unexpired at `now` (others keep -1).
  void find_rows(const Request& request, std::vector<std::int64_t>& rows, Clock::time_point now = {}) const;
  // Keeps row `i` of `batch` (extracted for `model`, the cache's) as item
  // `id`'s until `expires`; `now` decides which rows have expired when the
  // cache drops them.
  void put(const std::string& id, const Batch& batch, std::size_t i, Clock::time_point expires,
           Clock::time_point now = Clock::now());
  // Counts the times the cache was emptied or its expired rows dropped:
  // rows found before a change are not this cache's any more.
  std::uint64_t generation() const { return generation_; }

  // A cached row's value of the model's dense feature `column`, and its ids
  // of sparse feature `bag` (in ModelSpec::dense_features() and
  // sparse_features() order; item features only). `row` is what
  // find_rows() gave: where the row's record starts.
  float dense_value(std::int64_t row, std::size_t column) const {
    float value;
    std::memcpy(&value, bytes(row) + 8 * header_words_ + 4 * static_cast<std::size_t>(dense_slot_[column]), sizeof value);
    return value;
  }
  std::span<const std::int64_t> ids(std::int64_t row, std::size_t bag) const {
    const auto slot = static_cast<std::size_t>(sparse_slot_[bag]);
    const std::int64_t* first = records_.data() + row + header_words_ + dense_words_;
    return {first + (slot == 0 ? 0 : id_end(row, slot - 1)), first + id_end(row, slot)};
  }
  // Starts loading a row's record into the cache.
  void prefetch(std::int64_t row) const {
    for (std::size_t line = 0; line < record_lines_; ++line) __builtin_prefetch(bytes(row) + 64 * line);
  }

 private:
  static ItemCache with_slots(const ModelSpec& model);
  // The first slot from `at` on that holds `hash`, or the empty slot ending the run.
  std::size_t next_match(std::uint64_t hash, std::size_t at) const;
  void index_ids();
  void index(std::uint32_t row);  // into slots_, which has room
  void clear();
  // Drops the rows expired at `now`, moving the others' records down.
  void drop_expired(Clock::time_point now);
  // Appends row `i` of `batch` (extracted for the cache's model) as item `id`'s record.
  void append_record(std::string_view id, const Batch& batch, std::size_t i);
  // The item id a record was kept for.
  std::string_view record_id(std::int64_t row) const {
    const char* first = bytes(row) + 8 * (header_words_ + dense_words_) + 8 * id_end(row, sparse_width_);
    return {first, id_end(row, sparse_width_ + 1)};
  }
  const char* bytes(std::int64_t row) const { return reinterpret_cast<const char*>(records_.data() + row); }
  std::uint32_t id_end(std::int64_t row, std::size_t slot) const {
    std::uint32_t end;
    std::memcpy(&end, bytes(row) + 4 * slot, sizeof end);
    return end;
  }
  std::vector<int> dense_slot_;   // per dense feature: its column here, -1 if not an item feature
  std::vector<int> sparse_slot_;  // per sparse feature: likewise
  std::size_t dense_width_ = 0, sparse_width_ = 0;
  // Item id -> record: open addressing in one flat array, so a request's 200
  // ids can be hashed and their slots prefetched before the first is probed
  // — one trip to memory for all of them instead of 200 in a row. In the
  // server every forward evicts the table, so these misses were most of the
  // query stage.
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t row = kNoRow;
    std::uint32_t record = 0;  // where the row's record starts in records_
  };
  static constexpr std::uint32_t kNoRow = ~std::uint32_t{0};
  // In huge pages, as records_: 200 random rows would otherwise be 400 TLB misses.
  std::vector<Slot, numa::HugePageAllocator<Slot>> slots_;  // a power of two, at most half full
  std::vector<std::uint32_t> records_at_;  // by row: where its record starts
  // Each row's record, contiguous, so a row found is one or two cache lines
  // on their way at once (the forward evicts them between requests; with
  // the ids, values, id offsets and ids in four arrays each row took four
  // misses, some waiting on others): a header of uint32s (the ends of its
  // bags' ids, sparse_width_ of them, their total, the item id's length), its dense
  // values (float, dense_width_), each padded to whole words, its bags' ids,
  // then the item id's bytes, which confirm a slot's match.
  std::vector<std::int64_t, numa::HugePageAllocator<std::int64_t>> records_;
  std::size_t header_words_ = 0, dense_words_ = 0, record_lines_ = 1;
  // Filled as requests go (empty()): each row's expiry, and the bound.
  std::vector<Clock::time_point> expires_;
  std::size_t max_rows_ = 0;
  std::size_t drop_at_ = 0;  // rows at which the expired ones are next dropped
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
