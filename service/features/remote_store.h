#pragma once
// A feature store asked per request over the network (Feast's Redis online
// store: service/feast/). Each worker has its own client, used only on its
// own event loop's thread: no locks between workers, and a worker waiting
// for features keeps serving its other connections.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "features/extract.h"

namespace numaserve::features {

// What the store holds for one request, as query() finds it in the embedded store.
struct Fetched {
  std::shared_ptr<const Features> user;                // null: nothing stored
  std::vector<std::shared_ptr<const Features>> items;  // one per request item
  bool degraded = false;  // the store failed; what it could not give is the model's defaults

  StoredFeatures stored() const {
    StoredFeatures out{user.get(), {}, {}};
    out.items.reserve(items.size());
    for (const auto& item : items) out.items.push_back(item.get());
    return out;
  }
};

// Read at scrape time, from any thread.
struct RemoteStoreStats {
  std::string store;  // where, without secrets
  std::vector<std::pair<std::string, std::uint64_t>> errors;  // by kind
  std::uint64_t degraded = 0;      // requests answered with defaults for what failed
  // Kept by the service, which keeps the item caches: items found there,
  // and items asked of the store.
  std::uint64_t cache_hits = 0;
  std::uint64_t cache_misses = 0;
  std::vector<std::string> breakers;  // per worker: closed, open, half_open
  std::vector<bool> connected;        // per worker
};

class RemoteStore {
 public:
  virtual ~RemoteStore() = default;
  // On worker `worker`'s loop thread, before its first fetch: connects.
  virtual void start_worker(std::size_t worker) = 0;
  // What the store holds for the request's user and its items, but those
  // with a row in `cached` (ItemCache::find_rows: -1 for the others). `done`
  // runs once, on the worker's loop, within the store's deadline; an error
  // is the 503 the failure policy asks for.
  virtual void fetch(std::size_t worker, const Request& request, const std::vector<std::int64_t>& cached,
                     std::function<void(Result<Fetched>&&)> done) = 0;
  virtual RemoteStoreStats stats() const = 0;
};

}  // namespace numaserve::features
