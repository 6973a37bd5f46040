#include "feature_store/embedded.h"

#include <nlohmann/json.hpp>

#include "numaserve/common/text_file.h"

namespace numaserve::feature_store {

using features::Features;
using features::FeatureValue;
namespace {

// A JSON value as a feature value: number, string, or list of strings.
std::optional<FeatureValue> to_feature_value(const nlohmann::json& v) {
  if (v.is_number()) return FeatureValue(v.get<double>());
  if (v.is_string()) return FeatureValue(v.get<std::string>());
  if (v.is_array()) {
    std::vector<std::string> ids;
    for (const auto& item : v) {
      if (item.is_string()) {
        ids.push_back(item.get<std::string>());
      } else if (item.is_number_integer()) {
        ids.push_back(item.dump());
      } else {
        return std::nullopt;
      }
    }
    return FeatureValue(std::move(ids));
  }
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Entities>> Entities::load(const std::filesystem::path& file) {
  auto text = read_text_file(file);
  if (!text) return tl::unexpected(std::move(text.error()).with_context("feature store"));
  return parse(*text, file.string());
}

Result<std::unique_ptr<Entities>> Entities::parse(std::string_view jsonl,
                                                                           const std::string& file) {
  auto store = std::make_unique<Entities>();
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < jsonl.size();) {
    const auto end = std::min(jsonl.find('\n', pos), jsonl.size());
    const std::string_view line = jsonl.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = file + " line " + std::to_string(line_no);
    const auto json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
      return make_error(Error::Code::kInvalidArgument, where + ": not a JSON object", file);
    }
    const std::string kind =
        json.contains("kind") && json["kind"].is_string() ? json["kind"].get<std::string>() : std::string();
    Table* table = kind == "user" ? &store->users_ : kind == "item" ? &store->items_ : nullptr;
    if (table == nullptr) {
      return make_error(Error::Code::kInvalidArgument, where + ": kind must be \"user\" or \"item\"", "kind");
    }
    const auto& id = json.contains("id") ? json["id"] : nlohmann::json();
    if (!id.is_string() && !id.is_number_integer()) {
      return make_error(Error::Code::kInvalidArgument, where + ": id must be a string or an integer", "id");
    }
    Features features;
    const auto& values = json.contains("features") ? json["features"] : nlohmann::json::object();
    if (!values.is_object()) {
      return make_error(Error::Code::kInvalidArgument, where + ": features must be an object", "features");
    }
    for (const auto& [name, value] : values.items()) {
      auto converted = to_feature_value(value);
      if (!converted) {
        return make_error(Error::Code::kInvalidArgument,
                          where + ": feature '" + name + "' must be a number, a string or a list of ids", name);
      }
      features.emplace(name, std::move(*converted));
    }
    const std::string key = id.is_string() ? id.get<std::string>() : id.dump();
    if (!table->emplace(key, std::move(features)).second) {
      return make_error(Error::Code::kInvalidArgument, where + ": " + kind + " '" + key + "' appears twice", "id");
    }
  }
  return store;
}

const Features* Entities::find(const Table& table, std::string_view id) {
  const auto it = table.find(id);
  return it == table.end() ? nullptr : &it->second;
}

const Features* Entities::user(std::string_view id) const { return find(users_, id); }
const Features* Entities::item(std::string_view id) const { return find(items_, id); }

void Entities::for_each_item(const features::EntityVisitor& visit) const {
  for (const auto& [id, features] : items_) visit(id, features);
}

void Entities::for_each_user(const features::EntityVisitor& visit) const {
  for (const auto& [id, features] : users_) visit(id, features);
}

features::StoredFeatures Entities::query(const features::Request& request, const features::ItemCache* cache) const {
  features::StoredFeatures stored;
  stored.user = request.user.id.empty() ? nullptr : user(request.user.id);
  stored.items.resize(request.items.size());
  if (cache != nullptr) {
    stored.cached_rows.assign(request.items.size(), -1);
    cache->find_rows(request, stored.cached_rows);
  }
  for (std::size_t i = 0; i < request.items.size(); ++i) {
    if (stored.cached_rows.empty() || stored.cached_rows[i] < 0) stored.items[i] = item(request.items[i].id);
  }
  return stored;
}

Result<features::Batch> extract(const features::ModelSpec& model, const features::Request& request,
                                const Entities& entities) {
  return features::extract(model, request, entities.query(request));
}

Result<std::unique_ptr<EmbeddedStore>> EmbeddedStore::open(std::unique_ptr<Entities> entities,
                                                           const std::vector<const features::ModelSpec*>& models) {
  std::unique_ptr<EmbeddedStore> store(new EmbeddedStore(std::move(entities)));
  for (std::size_t m = 0; m < models.size(); ++m) {
    if (auto added = store->add_model(m, *models[m]); !added) return tl::unexpected(added.error());
  }
  return store;
}

Status EmbeddedStore::add_model(std::size_t model_index, const features::ModelSpec& spec) {
  std::lock_guard lock(adding_);
  if (auto next = check_next_model(model_index, caches_.size(), spec); !next) return next;
  auto cache = features::ItemCache::build(spec, [&](const features::EntityVisitor& visit) { entities_->for_each_item(visit); });
  if (!cache) return tl::unexpected(cache.error());
  caches_.push(std::make_unique<features::ItemCache>(std::move(*cache)));
  return {};
}

void EmbeddedStore::fetch(std::size_t, std::size_t model_index, const features::Request& request, Done done) {
  const features::ItemCache& cache = caches_[model_index];
  done(Found{entities_->query(request, &cache), &cache, {}, false});
}

}  // namespace numaserve::feature_store
