// The one place the service's feature store is chosen: what --feature-store
// names decides it.
#include "feature_store/store.h"

#include "feature_store/embedded.h"
#include "feature_store/redis_store.h"
#include "numaserve/common/log.h"

namespace numaserve::feature_store {
namespace {

Result<std::unique_ptr<FeatureStore>> open_embedded(const OpenConfig& c, const std::vector<const features::ModelSpec*>& models) {
  // No store: every feature comes with the request, or is a default.
  auto entities = c.feature_store.empty() ? Entities::parse("", "no store") : Entities::load(c.feature_store);
  if (!entities) return tl::unexpected(entities.error());
  if (!c.feature_store.empty()) {
    log(LogLevel::kInfo, "feature store loaded",
        {{"file", c.feature_store}, {"users", std::to_string((*entities)->users())},
         {"items", std::to_string((*entities)->items())}});
  }
  auto store = EmbeddedStore::open(std::move(*entities), models);
  if (!store) return tl::unexpected(store.error());
  return std::unique_ptr<FeatureStore>(std::move(*store));
}

// Feast's Redis online store (one server or a cluster), one client per worker on its event loop.
Result<std::unique_ptr<FeatureStore>> open_redis(const OpenConfig& c, const std::vector<const features::ModelSpec*>& models) {
  auto url = redis::parse_any_url(c.feature_store, c.password_file);
  if (!url) return tl::unexpected(url.error());
  auto store = open_redis_store(*url, models, c.store, c.workers, c.loop_of);
  if (!store) return tl::unexpected(store.error());
  log(LogLevel::kInfo, "feature store: Feast's Redis online store",
      {{"store", (*store)->stats()->store}, {"project", models.front()->store.project},
       {"timeout", std::to_string(c.store.client.timeout_seconds) + "s"},
       {"on_error", c.store.fail_on_error ? "fail" : "default"}});
  return store;
}

}  // namespace

Status FeatureStore::check_next_model(std::size_t model_index, std::size_t count, const features::ModelSpec& spec) {
  if (model_index != count) {
    return make_error(Error::Code::kInternal,
                      "model " + spec.name + " added as number " + std::to_string(model_index) + ", " + std::to_string(count) + " expected");
  }
  if (model_index == kMaxModels) {
    return make_error(Error::Code::kUnavailable, "model " + spec.name + ": a service serves at most " + std::to_string(kMaxModels) + " models", "model");
  }
  return {};
}

Result<std::unique_ptr<FeatureStore>> open_store(const OpenConfig& config, const std::vector<const features::ModelSpec*>& models) {
  return redis::is_url(config.feature_store) ? open_redis(config, models) : open_embedded(config, models);
}

}  // namespace numaserve::feature_store
