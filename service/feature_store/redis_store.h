#pragma once
// Feast's Redis online store: Feast's format (feast_format.h) read through
// one asynchronous client per worker (redis/), of one server or of a Redis
// Cluster (Feast's redis_type: redis_cluster), one pipelined HMGET batch per
// request (per master, in a cluster) — the user's hash and every item's the
// worker's item cache does not hold — with a deadline and a failure policy. Each worker keeps the
// items it fetched, extracted, for a while (StoreConfig::item_cache_ttl_seconds),
// so the next request asks Redis for its user only.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "feature_store/feast_format.h"
#include "feature_store/store.h"
#include "redis/cluster.h"
#include "redis/redis.h"

namespace numaserve::feature_store {

// One server, or a cluster with the slot map read at start.
using RedisWhere = std::variant<redis::Url, redis::ClusterStart>;

class RedisStore final : public FeatureStore {
 public:
  // After the start-up check (open_store). `loop_of(w)` is worker w's event
  // loop, asked for on that loop's thread.
  RedisStore(RedisWhere where, Layout layout, std::vector<const features::ModelSpec*> models, StoreConfig config,
             std::size_t workers, std::function<boost::asio::io_context&(std::size_t)> loop_of);
  ~RedisStore() override;

  void start_worker(std::size_t worker) override;
  void fetch(std::size_t worker, std::size_t model_index, const features::Request& request, Done done) override;
  void keep(std::size_t worker, std::size_t model_index, const features::Request& request, const Found& found,
            const features::Batch& batch) override;
  std::optional<StoreStats> stats() const override;
  bool networked() const override { return true; }
  // Served from the layout built at start: a model reading other fields is
  // refused (a restart serves it).
  Status add_model(std::size_t model_index, const features::ModelSpec& spec) override;

 private:
  struct Worker;
  struct Asked;
  void ask(const std::shared_ptr<Asked>& asked);
  void answer(const std::shared_ptr<Asked>& asked, redis::Outcome&& outcome);
  // Command `command`'s reply into the features it holds (once: a cluster's
  // replies are decoded as they come, the rest when all are in).
  void decode(Asked& asked, std::size_t command, const redis::Reply& reply) const;
  // The failure policy: what could be fetched with defaults for the rest, or a 503.
  Result<Found> fail(Found&& partial, const std::string& message);
  // Numbers `spec` as the next model: its spec kept, an item cache per worker.
  void take(const features::ModelSpec& spec);
  // This worker's cache of fetched items for a model; null when off.
  features::ItemCache* cache_of(std::size_t worker, std::size_t model_index) const;

  const RedisWhere where_;
  const std::string redacted_;  // where_, as logs and metrics name it
  const Layout layout_;
  const StoreConfig config_;
  const std::vector<std::string> user_fields_, item_fields_;
  std::function<boost::asio::io_context&(std::size_t)> loop_of_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex adding_;
  std::vector<features::ModelSpec> specs_;  // every model's, in number order (add_model's alone)
  std::atomic<std::uint64_t> errors_[redis::kFailureKinds + 1] = {};  // + unreadable
  std::atomic<std::uint64_t> degraded_{0}, cache_hits_{0}, cache_misses_{0};
  redis::NodeCounters nodes_;  // a cluster's, per master
};

// Connects once (PING; a cluster: reads the slot map and PINGs every
// master) so that a wrong address, password or db is an error at start
// naming the URL (never the password), not a stream of 503s.
Result<std::unique_ptr<FeatureStore>> open_redis_store(const redis::AnyUrl& url,
                                                       const std::vector<const features::ModelSpec*>& models,
                                                       StoreConfig config, std::size_t workers,
                                                       std::function<boost::asio::io_context&(std::size_t)> loop_of);

}  // namespace numaserve::feature_store
