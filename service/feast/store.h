#pragma once
// The Redis feature store: Feast's online format (feast.h) read through one
// asynchronous client per worker (redis/), one pipelined HMGET batch per
// request — the user's hash and every item's the worker's item cache does
// not hold (the service keeps that cache: extracted rows) — with a deadline
// and a failure policy.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "feast/feast.h"
#include "features/remote_store.h"
#include "redis/redis.h"

namespace numaserve::feast {

struct StoreConfig {
  redis::ClientConfig client;
  // On a timeout, refusal, lost connection, open breaker or unreadable
  // value: false answers with the model's defaults for what is missing (and
  // counts it); true refuses the request with 503 and Retry-After.
  bool fail_on_error = false;
  double max_age_seconds = 0;  // values older than this count as missing; 0: any age
};

// The store as the operator configured it: the models' layout, and one
// blocking connection first so that a wrong address, password or db is an
// error at start naming the URL (never the password), not a stream of 503s.
class RedisStore;
Result<std::unique_ptr<RedisStore>> open_store(const redis::Url& url, const std::vector<const features::ModelSpec*>& models,
                                               StoreConfig config, std::size_t workers,
                                               std::function<boost::asio::io_context&(std::size_t)> loop_of);

class RedisStore final : public features::RemoteStore {
 public:
  // `loop_of(w)` is worker w's event loop, asked for on that loop's thread.
  RedisStore(redis::Url url, Layout layout, StoreConfig config, std::size_t workers,
             std::function<boost::asio::io_context&(std::size_t)> loop_of);
  ~RedisStore() override;

  void start_worker(std::size_t worker) override;
  void fetch(std::size_t worker, const features::Request& request, const std::vector<std::int64_t>& cached,
             std::function<void(Result<features::Fetched>&&)> done) override;
  features::RemoteStoreStats stats() const override;

 private:
  struct Worker;
  struct Asked;
  void answer(Asked& asked, redis::Outcome&& outcome);
  // The failure policy: what could be fetched with defaults for the rest, or a 503.
  Result<features::Fetched> fail(features::Fetched&& partial, const std::string& message);

  const redis::Url url_;
  const Layout layout_;
  const StoreConfig config_;
  const std::vector<std::string> user_fields_, item_fields_;
  std::function<boost::asio::io_context&(std::size_t)> loop_of_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<std::uint64_t> errors_[redis::kFailureKinds + 1] = {};  // + unreadable
  std::atomic<std::uint64_t> degraded_{0};
};

}  // namespace numaserve::feast
