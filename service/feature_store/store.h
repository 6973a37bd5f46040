#pragma once
// Where a request's stored features come from: one asynchronous interface
// for every store, so /predict has one path. The embedded store (a JSON
// Lines file in memory, embedded.h) answers at once, inside fetch(); Feast's
// Redis online store (redis_store.h) answers on the worker's event loop when
// its replies or its deadline come, and the worker serves its other
// connections meanwhile. Each worker calls only on its own thread: no locks
// between workers.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "feature_store/config.h"
#include "feature_store/stats.h"
#include "features/extract.h"
#include "numaserve/common/result.h"

namespace boost::asio {
class io_context;
}

namespace numaserve::feature_store {

using features::kMaxModels;

// What a fetch found for one request: what extraction reads. `stored`
// points into the store's own tables or into `held`; rows of
// stored.cached_rows point into `cache`.
struct Found {
  features::StoredFeatures stored;
  const features::ItemCache* cache = nullptr;
  std::vector<std::shared_ptr<const features::Features>> held;  // fetched values, alive while read
  bool degraded = false;  // the store failed; what it could not give is the model's defaults
};

using Done = std::function<void(Result<Found>&&)>;

class FeatureStore {
 public:
  virtual ~FeatureStore() = default;
  // On worker `worker`'s thread, before its first fetch (a networked store
  // connects; readiness does not wait for it).
  virtual void start_worker(std::size_t worker) { (void)worker; }
  // What the store holds for the request's user and items, for the
  // `model_index`-th model it was opened with. `done` runs exactly once, on the
  // worker's thread; an error is the 503 the failure policy asks for.
  virtual void fetch(std::size_t worker, std::size_t model_index, const features::Request& request, Done done) = 0;
  // A model added after start, before it serves (the repository's manager,
  // on its loading thread, while the workers serve the others): it becomes
  // model number `model_index`, the count so far. Refused, with the reason, where
  // this store cannot serve it without a restart.
  virtual Status add_model(std::size_t model_index, const features::ModelSpec& spec) = 0;

  // After extraction: the rows of `batch` the store may keep for the next
  // requests on this worker (a networked store's item cache); `found` is
  // what this request's fetch gave.
  virtual void keep(std::size_t worker, std::size_t model_index, const features::Request& request, const Found& found,
                    const features::Batch& batch) {
    (void)worker, (void)model_index, (void)request, (void)found, (void)batch;
  }
  // Counters for /metrics; none for a store in memory.
  virtual std::optional<StoreStats> stats() const { return std::nullopt; }
  // A store across the network, whose wait is timed apart (numaserve_feature_store_seconds).
  virtual bool networked() const { return false; }

 protected:
  // What every store checks first in add_model: `model_index` is the next number
  // (`count` so far) and there is room for it.
  static Status check_next_model(std::size_t model_index, std::size_t count, const features::ModelSpec& spec);
};

// The store `--feature-store` names: a JSON Lines file (or nothing: every
// feature comes with the request or is a default) or a redis:// / unix://
// URL, checked by connecting once now so a wrong address is an error at
// start naming it. `loop_of(w)` is worker w's event loop, asked for on its
// thread, where a networked store's client waits.
struct OpenConfig {
  std::string feature_store;  // a file, a URL or empty
  std::string password_file;
  StoreConfig store;
  std::size_t workers = 1;
  std::function<boost::asio::io_context&(std::size_t)> loop_of;
};
Result<std::unique_ptr<FeatureStore>> open_store(const OpenConfig& config,
                                                 const std::vector<const features::ModelSpec*>& models);

}  // namespace numaserve::feature_store
