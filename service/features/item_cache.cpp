// ItemCache (extract.h): each model's extracted item rows, found by id in
// an open-addressing table; built from a store that lists its items, or
// filled as requests fetch them (until they expire).
#include <algorithm>
#include <optional>

#include "features/extract.h"

namespace numaserve::features {

namespace {
std::uint64_t id_hash(std::string_view id) { return std::hash<std::string_view>{}(id); }
}  // namespace

void ItemCache::index_ids() {
  std::size_t size = 16;
  while (size < 2 * records_at_.size()) size *= 2;
  slots_.assign(size, Slot{});
  for (std::uint32_t row = 0; row < records_at_.size(); ++row) index(row);
}

void ItemCache::index(std::uint32_t row) {
  const std::uint64_t h = id_hash(record_id(records_at_[row]));
  const std::size_t mask = slots_.size() - 1;
  std::size_t at = h & mask;
  while (slots_[at].row != kNoRow) at = (at + 1) & mask;
  slots_[at] = Slot{h, row, records_at_[row]};
}

std::size_t ItemCache::next_match(std::uint64_t hash, std::size_t at) const {
  const std::size_t mask = slots_.size() - 1;
  while (slots_[at].row != kNoRow && slots_[at].hash != hash) at = (at + 1) & mask;
  return at;
}

void ItemCache::find_rows(const Request& request, std::vector<std::int64_t>& rows, Clock::time_point now) const {
  const std::size_t n = request.items.size(), mask = slots_.size() - 1;
  // Inline features override the store's, so such an item is extracted afresh.
  auto cacheable = [&](std::size_t i) { return request.items[i].features.empty(); };
  std::vector<std::uint64_t> hashes(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!cacheable(i)) continue;
    hashes[i] = id_hash(request.items[i].id);
    __builtin_prefetch(&slots_[hashes[i] & mask]);
  }
  // The slots are on their way; the records of their first matches next.
  std::vector<std::size_t> at(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!cacheable(i)) continue;
    at[i] = next_match(hashes[i], hashes[i] & mask);
    if (slots_[at[i]].row != kNoRow) prefetch(slots_[at[i]].record);
  }
  // Each match confirmed by its id; a second id with the same 64-bit hash
  // sends the probe on.
  for (std::size_t i = 0; i < n; ++i) {
    if (!cacheable(i)) continue;
    for (std::size_t slot = at[i]; slots_[slot].row != kNoRow; slot = next_match(hashes[i], (slot + 1) & mask)) {
      if (record_id(slots_[slot].record) != request.items[i].id) continue;
      // An expired row: a newer one of this id, if any, comes later in the run.
      if (!expires_.empty() && expires_[slots_[slot].row] <= now) continue;
      rows[i] = slots_[slot].record;
      break;
    }
  }
}

ItemCache ItemCache::with_slots(const ModelSpec& model) {
  ItemCache cache;
  for (const auto* f : model.dense_features()) {
    cache.dense_slot_.push_back(f->source == Source::kItem ? static_cast<int>(cache.dense_width_++) : -1);
  }
  for (const auto* f : model.sparse_features()) {
    cache.sparse_slot_.push_back(f->source == Source::kItem ? static_cast<int>(cache.sparse_width_++) : -1);
  }
  cache.header_words_ = (cache.sparse_width_ + 2 + 1) / 2;
  cache.dense_words_ = (cache.dense_width_ + 1) / 2;
  return cache;
}

ItemCache ItemCache::empty(const ModelSpec& model, std::size_t max_rows) {
  ItemCache cache = with_slots(model);
  cache.max_rows_ = max_rows;
  cache.clear();
  return cache;
}

// The fewest rows at which expired ones are dropped: below it the pass
// costs more than the rows it would free.
constexpr std::size_t kFirstDrop = 4096;

void ItemCache::clear() {
  ++generation_;
  records_at_.clear();
  records_.clear();
  expires_.clear();
  slots_.assign(16, Slot{});
  drop_at_ = kFirstDrop;
}

// In place and in order: each kept record moves down over dropped ones
// (std::copy to a lower address), so the vectors keep their capacity and a
// cache in a steady state allocates nothing more.
void ItemCache::drop_expired(Clock::time_point now) {
  ++generation_;
  std::size_t kept = 0, to = 0;
  for (std::size_t row = 0; row < records_at_.size(); ++row) {
    const std::size_t from = records_at_[row];
    const std::size_t end = row + 1 < records_at_.size() ? records_at_[row + 1] : records_.size();
    if (expires_[row] <= now) continue;
    std::copy(records_.begin() + static_cast<std::ptrdiff_t>(from), records_.begin() + static_cast<std::ptrdiff_t>(end),
              records_.begin() + static_cast<std::ptrdiff_t>(to));
    records_at_[kept] = static_cast<std::uint32_t>(to);
    expires_[kept] = expires_[row];
    to += end - from;
    ++kept;
  }
  records_.resize(to);
  records_at_.resize(kept);
  expires_.resize(kept);
  if (2 * kept >= max_rows_) return clear();
  index_ids();
  drop_at_ = std::max(kFirstDrop, 2 * kept);
}

void ItemCache::append_record(std::string_view id, const Batch& batch, std::size_t i) {
  const std::size_t at = records_.size();
  records_at_.push_back(static_cast<std::uint32_t>(at));
  records_.resize(at + header_words_ + dense_words_);
  auto set_header = [&](std::size_t k, std::size_t value) {
    const auto v = static_cast<std::uint32_t>(value);
    std::memcpy(reinterpret_cast<char*>(records_.data() + at) + 4 * k, &v, sizeof v);
  };
  char* record = reinterpret_cast<char*>(records_.data() + at);
  for (std::size_t c = 0; c < dense_slot_.size(); ++c) {
    if (dense_slot_[c] < 0) continue;
    std::memcpy(record + 8 * header_words_ + 4 * static_cast<std::size_t>(dense_slot_[c]),
                &batch.dense[i * batch.dense_width + c], sizeof(float));
  }
  for (std::size_t b = 0; b < sparse_slot_.size(); ++b) {
    if (sparse_slot_[b] < 0) continue;
    const Bag& bag = batch.bags[b];
    const auto from = static_cast<std::size_t>(bag.offsets[i]);
    const auto to = i + 1 < bag.offsets.size() ? static_cast<std::size_t>(bag.offsets[i + 1]) : bag.indices.size();
    records_.insert(records_.end(), bag.indices.begin() + static_cast<std::ptrdiff_t>(from),
                    bag.indices.begin() + static_cast<std::ptrdiff_t>(to));
    set_header(static_cast<std::size_t>(sparse_slot_[b]), records_.size() - at - header_words_ - dense_words_);
  }
  set_header(sparse_width_, records_.size() - at - header_words_ - dense_words_);  // where the item id starts
  set_header(sparse_width_ + 1, id.size());
  const std::size_t id_at = records_.size();
  records_.resize(id_at + (id.size() + 7) / 8);
  std::memcpy(records_.data() + id_at, id.data(), id.size());
  // Lines to prefetch per row: the mean record's, and the one it may straddle.
  const std::size_t mean_bytes = 8 * records_.size() / records_at_.size();
  record_lines_ = std::min<std::size_t>(4, (mean_bytes + 63) / 64 + 1);
}

void ItemCache::put(const std::string& id, const Batch& batch, std::size_t i, Clock::time_point expires,
                    Clock::time_point now) {
  if (records_at_.size() >= std::min(drop_at_, max_rows_)) drop_expired(now);
  const auto row = static_cast<std::uint32_t>(records_at_.size());
  expires_.push_back(expires);
  append_record(id, batch, i);
  if (2 * records_at_.size() > slots_.size()) {
    index_ids();
  } else {
    index(row);
  }
}

Result<ItemCache> ItemCache::build(const ModelSpec& model, const std::function<void(const EntityVisitor&)>& for_each_item) {
  ItemCache cache = with_slots(model);
  std::optional<Error> failed;
  Request one;
  one.items.resize(1);
  StoredFeatures stored;
  stored.items.resize(1);
  for_each_item([&](const std::string& id, const Features& features) {
    if (failed) return;
    one.items[0].id = id;
    stored.items[0] = &features;
    auto row = extract(model, one, stored);
    if (!row) {
      failed = row.error();
      return;
    }
    cache.append_record(id, *row, 0);
  });
  if (failed) return tl::unexpected(std::move(*failed).with_context("model " + model.name));
  cache.index_ids();
  return cache;
}

}  // namespace numaserve::features
