#include "model/rows.h"

#include <array>
#include <random>
#include <utility>

namespace numaserve::model {

features::Batch random_rows(const features::ModelSpec& spec, std::size_t rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dense(0.f, 2.f);
  features::Batch batch;
  batch.rows = rows;
  batch.dense_width = spec.dense_features().size();
  for (std::size_t i = 0; i < rows * batch.dense_width; ++i) batch.dense.push_back(dense(rng));
  for (const auto* feature : spec.sparse_features()) {
    const auto table = spec.tables.find(feature->table);
    const std::uint64_t table_rows = table == spec.tables.end() || table->second == 0 ? 1 : table->second;
    const std::uint64_t longest = feature->kind == features::Kind::kId ? 1 : feature->max_len == 0 ? 100 : feature->max_len;
    features::Bag bag;
    for (std::size_t r = 0; r < rows; ++r) {
      bag.offsets.push_back(static_cast<std::int64_t>(bag.indices.size()));
      // The edges in turn: empty, one id, the longest, then any length.
      const std::uint64_t length = std::array<std::uint64_t, 4>{0, 1, longest, rng() % (longest + 1)}[(r + seed) % 4];
      for (std::uint64_t k = 0; k < length; ++k) bag.indices.push_back(static_cast<std::int64_t>(rng() % table_rows));
    }
    batch.bags.push_back(std::move(bag));
  }
  return batch;
}

Result<features::Batch> default_rows(const features::ModelSpec& spec, std::size_t rows) {
  features::Request request;
  request.items.resize(rows);
  features::StoredFeatures nothing_stored;
  nothing_stored.items.resize(rows);
  return features::extract(spec, request, nothing_stored);
}

}  // namespace numaserve::model
