#include "feature_store/redis_store.h"

#include <algorithm>
#include <chrono>

#include "numaserve/common/append_only.h"
#include "numaserve/common/duration.h"

namespace numaserve::feature_store {
namespace {

constexpr std::size_t kUnreadable = redis::kFailureKinds;  // errors_'s last slot

std::string_view kind_name(std::size_t kind) {
  return kind == kUnreadable ? "unreadable" : redis::kFailureNames.name(static_cast<redis::Failure>(kind));
}

redis::Command hmget(const std::string& key, const std::vector<std::string>& fields) {
  redis::Command command;
  command.reserve(fields.size() + 2);
  command.push_back("HMGET");
  command.push_back(key);
  command.insert(command.end(), fields.begin(), fields.end());
  return command;
}

}  // namespace

struct RedisStore::Worker {
  std::unique_ptr<redis::Endpoint> client;  // made and used on the worker's thread
  std::atomic<const redis::Endpoint*> published{nullptr};  // the same, for stats() on other threads
  AppendOnly<features::ItemCache, kMaxModels> caches;  // per model; none when the cache is off
};

// One request's fetch while its pipeline is out. The request outlives it:
// the caller keeps it until `done` has run.
struct RedisStore::Asked {
  std::size_t worker, model_index;
  const features::Request& request;
  Done done;
  Found found;
  bool user = false;                  // the first command is the user's
  std::vector<std::size_t> items{};   // request item of each following command
  std::uint64_t generation = 0;       // the item cache's when its rows were found
  bool asked_again = false;           // the cache was emptied while the first query was out
  std::vector<char> decoded{};        // per command: its reply decoded (a cluster's come apart)
  std::optional<std::string> unreadable{};  // the first reply the model cannot read
  std::chrono::system_clock::time_point sent{};  // the query's time: what --max-feature-age is counted to
};

namespace {

// A start-up check may take longer than a request's deadline.
double check_timeout(const StoreConfig& config) { return std::max(1.0, config.client.timeout_seconds); }

Result<RedisWhere> check(const redis::Url& url, const StoreConfig& config) {
  auto checked = redis::Connection::open(url, check_timeout(config));
  if (!checked) return tl::unexpected(checked.error());
  if (auto ping = checked->pipeline({{"PING"}}); !ping || (*ping)[0].error) {
    return make_error(Error::Code::kIo, "feature store " + url.redacted() + ": PING failed: " +
                                            (!ping ? ping.error().message : *(*ping)[0].error));
  }
  return url;
}

Result<RedisWhere> check(const redis::ClusterUrl& url, const StoreConfig& config) {
  auto checked = redis::ClusterConnection::open(url, check_timeout(config));
  if (!checked) return tl::unexpected(checked.error());
  if (auto ping = checked->ping_masters(); !ping) return tl::unexpected(ping.error());
  return checked->start();
}

std::string redacted(const RedisWhere& where) {
  return std::visit([](const auto& w) {
    if constexpr (std::is_same_v<std::decay_t<decltype(w)>, redis::Url>) {
      return w.redacted();
    } else {
      return w.url.redacted();
    }
  }, where);
}

}  // namespace

Result<std::unique_ptr<FeatureStore>> open_redis_store(const redis::AnyUrl& url,
                                                       const std::vector<const features::ModelSpec*>& models,
                                                       StoreConfig config, std::size_t workers,
                                                       std::function<boost::asio::io_context&(std::size_t)> loop_of) {
  auto layout = Layout::build(models);
  if (!layout) return tl::unexpected(layout.error());
  silence_protobuf_logs();
  auto where = std::visit([&](const auto& u) { return check(u, config); }, url);
  if (!where) return tl::unexpected(where.error());
  return std::make_unique<RedisStore>(std::move(*where), std::move(*layout), models, config, workers, std::move(loop_of));
}

RedisStore::RedisStore(RedisWhere where, Layout layout, std::vector<const features::ModelSpec*> models, StoreConfig config,
                       std::size_t workers, std::function<boost::asio::io_context&(std::size_t)> loop_of)
    : where_(std::move(where)),
      redacted_(redacted(where_)),
      layout_(std::move(layout)),
      config_(config),
      user_fields_(layout_.user().hmget_fields()),
      item_fields_(layout_.item().hmget_fields()),
      loop_of_(std::move(loop_of)) {
  for (std::size_t w = 0; w < workers; ++w) workers_.push_back(std::make_unique<Worker>());
  for (const auto* model : models) take(*model);  // open_redis_store built the layout of them
}

void RedisStore::take(const features::ModelSpec& spec) {
  specs_.push_back(spec);
  if (config_.item_cache_ttl_seconds <= 0) return;
  for (auto& worker : workers_) worker->caches.push(std::make_unique<features::ItemCache>(features::ItemCache::empty(spec, config_.item_cache_rows)));
}

Status RedisStore::add_model(std::size_t model_index, const features::ModelSpec& spec) {
  std::lock_guard lock(adding_);
  if (auto next = check_next_model(model_index, specs_.size(), spec); !next) return next;
  // The workers' pipelines ask for the fields of the layout built at start:
  // a model that reads others needs a restart to be asked for them.
  std::vector<const features::ModelSpec*> all;
  for (const auto& s : specs_) all.push_back(&s);
  all.push_back(&spec);
  auto layout = Layout::build(all);
  if (!layout) return tl::unexpected(layout.error());
  if (layout->user().hmget_fields() != user_fields_ || layout->item().hmget_fields() != item_fields_) {
    return make_error(Error::Code::kUnavailable,
                      "model " + spec.name + " reads features from Redis that the models served since start do not: the "
                      "store's layout is fixed at start, so serving it needs a restart",
                      "model");
  }
  take(spec);
  return {};
}

RedisStore::~RedisStore() = default;

void RedisStore::start_worker(std::size_t worker) {
  Worker& w = *workers_[worker];
  if (const auto* cluster = std::get_if<redis::ClusterStart>(&where_)) {
    w.client = std::make_unique<redis::ClusterClient>(loop_of_(worker), *cluster, config_.client, nodes_);
  } else {
    w.client = std::make_unique<redis::Client>(loop_of_(worker), std::get<redis::Url>(where_), config_.client);
  }
  w.published.store(w.client.get(), std::memory_order_release);
}

features::ItemCache* RedisStore::cache_of(std::size_t worker, std::size_t model_index) const {
  auto& caches = workers_[worker]->caches;
  return model_index < caches.size() ? &caches[model_index] : nullptr;
}

void RedisStore::fetch(std::size_t worker, std::size_t model_index, const features::Request& request, Done done) {
  ask(std::make_shared<Asked>(Asked{worker, model_index, request, std::move(done), {}}));
}

// The items this worker's cache holds are found there; the rest, and the
// user, are asked of Redis in one pipeline on this worker's loop.
void RedisStore::ask(const std::shared_ptr<Asked>& asked) {
  Asked& a = *asked;
  const features::Request& request = a.request;
  a.found = Found{};
  a.found.stored.items.assign(request.items.size(), nullptr);
  a.found.held.assign(request.items.size() + 1, nullptr);  // the user's, then the items'
  a.user = false;
  a.items.clear();
  std::size_t hits = 0;
  if (auto* cache = cache_of(a.worker, a.model_index)) {
    a.found.cache = cache;
    if (!a.asked_again) {
      a.found.stored.cached_rows.assign(request.items.size(), -1);
      cache->find_rows(request, a.found.stored.cached_rows, features::ItemCache::Clock::now());
      a.generation = cache->generation();
      hits = static_cast<std::size_t>(std::count_if(a.found.stored.cached_rows.begin(), a.found.stored.cached_rows.end(),
                                                    [](auto row) { return row >= 0; }));
    }
  }
  cache_hits_.fetch_add(hits, std::memory_order_relaxed);
  cache_misses_.fetch_add(request.items.size() - hits, std::memory_order_relaxed);
  std::vector<redis::Command> commands;
  // An id the entity key cannot hold (not an int64 for an INT64 join key)
  // cannot be stored: it is simply missing.
  if (!request.user.id.empty()) {
    if (auto key = layout_.user().redis_key(request.user.id)) {
      commands.push_back(hmget(*key, user_fields_));
      a.user = true;
    }
  }
  const auto& cached = a.found.stored.cached_rows;
  for (std::size_t i = 0; i < request.items.size(); ++i) {
    if (!cached.empty() && cached[i] >= 0) continue;
    auto key = layout_.item().redis_key(request.items[i].id);
    if (!key) continue;
    commands.push_back(hmget(*key, item_fields_));
    a.items.push_back(i);
  }
  if (commands.empty()) {
    a.done(std::move(a.found));
    return;
  }
  a.decoded.assign(commands.size(), 0);
  a.unreadable.reset();
  a.sent = std::chrono::system_clock::now();
  workers_[a.worker]->client->pipeline(
      std::move(commands), [this, asked](redis::Outcome&& outcome) { answer(asked, std::move(outcome)); },
      [this, asked](std::size_t command, const redis::Reply& reply) { decode(*asked, command, reply); });
}

Result<Found> RedisStore::fail(Found&& partial, const std::string& message) {
  if (config_.fail_on_error) {
    return make_error(Error::Code::kUnavailable, message + " (--on-feature-store-error fail)", "feature_store");
  }
  degraded_.fetch_add(1, std::memory_order_relaxed);
  partial.degraded = true;
  return std::move(partial);
}

void RedisStore::decode(Asked& a, std::size_t command, const redis::Reply& reply) const {
  if (a.decoded[command]) return;
  a.decoded[command] = 1;
  if (reply.failure) return;  // its master failed: counted as that failure
  const bool user = a.user && command == 0;
  const std::size_t item = user ? 0 : a.items[command - (a.user ? 1 : 0)];
  const std::string& id = user ? a.request.user.id : a.request.items[item].id;
  Result<features::Features> features =
      reply.error ? make_error(Error::Code::kInvalidArgument, "entity '" + id + "': " + *reply.error)
                  : Layout::decode(user ? layout_.user() : layout_.item(), id, reply.elements, config_.max_age_seconds, a.sent);
  if (!features) {
    if (!a.unreadable) a.unreadable = "feature store " + redacted_ + ": " + features.error().message;
    return;
  }
  auto& held = a.found.held[user ? 0 : item + 1];
  held = features->empty() ? nullptr : std::make_shared<const features::Features>(std::move(*features));
  (user ? a.found.stored.user : a.found.stored.items[item]) = held.get();
}

void RedisStore::answer(const std::shared_ptr<Asked>& asked, redis::Outcome&& outcome) {
  Asked& a = *asked;
  Result<Found> result = [&]() -> Result<Found> {
    if (outcome.failure) errors_[static_cast<std::size_t>(*outcome.failure)].fetch_add(1, std::memory_order_relaxed);
    if (outcome.failure && outcome.replies.empty()) return fail(std::move(a.found), outcome.message);
    // Every reply, or a cluster's partial answer: what its live masters
    // gave, less what was decoded as it came.
    for (std::size_t k = 0; k < outcome.replies.size(); ++k) decode(a, k, outcome.replies[k]);
    if (outcome.failure) return fail(std::move(a.found), outcome.message);
    if (!a.unreadable) return std::move(a.found);
    errors_[kUnreadable].fetch_add(1, std::memory_order_relaxed);
    return fail(std::move(a.found), *a.unreadable);
  }();
  const auto* cache = cache_of(a.worker, a.model_index);
  if (result && cache != nullptr && cache->generation() != a.generation && !a.asked_again) {
    // The cache was emptied (full) while this request waited: the rows it
    // found are gone, so its items are asked for too, once.
    a.asked_again = true;
    ask(asked);
    return;
  }
  a.done(std::move(result));
}

void RedisStore::keep(std::size_t worker, std::size_t model_index, const features::Request& request, const Found& found,
                      const features::Batch& batch) {
  features::ItemCache* cache = cache_of(worker, model_index);
  if (cache == nullptr || found.degraded) return;  // what the store failed to give is defaults, not worth keeping
  const auto now = features::ItemCache::Clock::now();
  const auto expires = now + to_duration(config_.item_cache_ttl_seconds);
  const auto& rows = found.stored.cached_rows;
  for (std::size_t i = 0; i < request.items.size(); ++i) {
    const bool fetched = rows.empty() || rows[i] < 0;
    if (fetched && request.items[i].features.empty()) cache->put(request.items[i].id, batch, i, expires, now);
  }
}

std::optional<StoreStats> RedisStore::stats() const {
  StoreStats out;
  out.store = redacted_;
  for (std::size_t kind = 0; kind <= kUnreadable; ++kind) {
    out.errors.emplace_back(std::string(kind_name(kind)), errors_[kind].load(std::memory_order_relaxed));
  }
  out.degraded = degraded_.load(std::memory_order_relaxed);
  out.cache_hits = cache_hits_.load(std::memory_order_relaxed);
  out.cache_misses = cache_misses_.load(std::memory_order_relaxed);
  for (const auto& worker : workers_) {
    const redis::Endpoint* client = worker->published.load(std::memory_order_acquire);
    out.breakers.emplace_back(redis::kBreakerStateNames.name(client ? client->breaker() : redis::BreakerState::kClosed));
    out.connected.push_back(client != nullptr && client->connected());
  }
  for (const auto& n : nodes_.snapshot()) out.nodes.push_back({n.node, n.pipelines, n.errors, n.moved, n.ask, n.refreshes});
  return out;
}

}  // namespace numaserve::feature_store
