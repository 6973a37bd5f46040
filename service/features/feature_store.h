#pragma once
// Where features come from when a request only names ids. The interface is
// deliberately narrow — look one entity up — so a networked store (Redis)
// can replace the embedded one without touching extraction.

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "features/features.h"
#include "numaserve/common/result.h"

namespace numaserve::features {

class FeatureStore {
 public:
  virtual ~FeatureStore() = default;
  // nullptr when the store has no such entity (extraction then uses defaults).
  virtual const Features* user(std::string_view id) const = 0;
  virtual const Features* item(std::string_view id) const = 0;
  // Stores that hold their items in memory list them, so a model can
  // extract every item once at start (ItemCache); others list nothing.
  virtual void for_each_item(const std::function<void(const std::string& id, const Features& features)>& visit) const {
    (void)visit;
  }
};

// Loaded once at start from a JSON Lines file, one entity per line:
//   {"kind": "user", "id": "u42", "features": {"age": 31, "country": "fr"}}
//   {"kind": "item", "id": "i7",  "features": {"price": 12.5, "tags": ["a", "b"]}}
// Values are numbers, strings or lists of strings; integers in JSON are
// numbers (use them for numeric features; write ids as strings or numbers,
// both hash the same). Lookups are O(1).
class EmbeddedFeatureStore final : public FeatureStore {
 public:
  static Result<std::unique_ptr<EmbeddedFeatureStore>> load(const std::filesystem::path& file);
  // From JSON Lines text; `file` names it in errors ("store.jsonl line 12: ...").
  static Result<std::unique_ptr<EmbeddedFeatureStore>> parse(std::string_view jsonl, const std::string& file);

  const Features* user(std::string_view id) const override;
  const Features* item(std::string_view id) const override;
  void for_each_item(const std::function<void(const std::string& id, const Features& features)>& visit) const override;
  void for_each_user(const std::function<void(const std::string& id, const Features& features)>& visit) const;
  std::size_t users() const { return users_.size(); }
  std::size_t items() const { return items_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Table = std::unordered_map<std::string, Features, Hash, std::equal_to<>>;
  static const Features* find(const Table& table, std::string_view id);
  Table users_;
  Table items_;
};

}  // namespace numaserve::features
