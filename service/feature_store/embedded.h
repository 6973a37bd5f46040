#pragma once
// The embedded feature store: a JSON Lines file loaded once at start, one
// entity per line:
//   {"kind": "user", "id": "u42", "features": {"age": 31, "country": "fr"}}
//   {"kind": "item", "id": "i7",  "features": {"price": 12.5, "tags": ["a", "b"]}}
// Values are numbers, strings or lists of strings; integers in JSON are
// numbers (use them for numeric features; write ids as strings or numbers,
// both hash the same). Lookups are O(1), and each model's items are
// extracted once at start (ItemCache), so a request copies their rows.

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "feature_store/store.h"
#include "features/extract.h"
#include "numaserve/common/append_only.h"
#include "numaserve/common/result.h"

namespace numaserve::feature_store {

// The file's users and items.
class Entities {
 public:
  static Result<std::unique_ptr<Entities>> load(const std::filesystem::path& file);
  // From JSON Lines text; `file` names it in errors ("store.jsonl line 12: ...").
  static Result<std::unique_ptr<Entities>> parse(std::string_view jsonl, const std::string& file);

  // nullptr when there is no such entity (extraction then uses defaults).
  const features::Features* user(std::string_view id) const;
  const features::Features* item(std::string_view id) const;
  void for_each_item(const features::EntityVisitor& visit) const;
  void for_each_user(const features::EntityVisitor& visit) const;
  std::size_t users() const { return users_.size(); }
  std::size_t items() const { return items_.size(); }

  // The feature-query stage: what these tables hold for the request's user
  // and items. With a model's ItemCache, an item without inline features
  // that the cache holds is found there instead, by the same one lookup:
  // its row, not its entry.
  features::StoredFeatures query(const features::Request& request, const features::ItemCache* cache = nullptr) const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Table = std::unordered_map<std::string, features::Features, Hash, std::equal_to<>>;
  static const features::Features* find(const Table& table, std::string_view id);
  Table users_;
  Table items_;
};

// query() then extract(): a request's rows from these entities alone.
Result<features::Batch> extract(const features::ModelSpec& model, const features::Request& request,
                                const Entities& entities);

class EmbeddedStore final : public FeatureStore {
 public:
  // Extracts every item once per model; a value a model cannot read fails
  // here, naming the model and the item ("model ranker_a: ... price: want a
  // number"), rather than per request.
  static Result<std::unique_ptr<EmbeddedStore>> open(std::unique_ptr<Entities> entities,
                                                     const std::vector<const features::ModelSpec*>& models);
  // Completes at once, on the calling thread.
  void fetch(std::size_t worker, std::size_t model_index, const features::Request& request, Done done) override;
  // Extracts every item for it (seconds for millions of items, on the
  // caller's thread), as open() does.
  Status add_model(std::size_t model_index, const features::ModelSpec& spec) override;

 private:
  explicit EmbeddedStore(std::unique_ptr<Entities> entities) : entities_(std::move(entities)) {}
  std::unique_ptr<Entities> entities_;
  std::mutex adding_;
  AppendOnly<features::ItemCache, kMaxModels> caches_;  // per model
};

}  // namespace numaserve::feature_store
