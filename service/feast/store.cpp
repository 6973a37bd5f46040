#include "feast/store.h"

#include <chrono>

namespace numaserve::feast {
namespace {

constexpr std::size_t kUnreadable = redis::kFailureKinds;  // errors_'s last slot

const char* kind_name(std::size_t kind) {
  return kind == kUnreadable ? "unreadable" : redis::to_string(static_cast<redis::Failure>(kind));
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
  std::unique_ptr<redis::Client> client;  // made and used on the worker's thread
  std::atomic<const redis::Client*> published{nullptr};  // the same, for stats() on other threads
};

// One request's fetch while its pipeline is out.
struct RedisStore::Asked {
  features::Fetched fetched;
  bool user = false;                  // the first command is the user's
  std::string user_id;
  std::vector<std::size_t> items;     // request item of each following command
  std::vector<std::string> item_ids;
  std::function<void(Result<features::Fetched>&&)> done;
};

Result<std::unique_ptr<RedisStore>> open_store(const redis::Url& url, const std::vector<const features::ModelSpec*>& models,
                                               StoreConfig config, std::size_t workers,
                                               std::function<boost::asio::io_context&(std::size_t)> loop_of) {
  auto layout = Layout::build(models);
  if (!layout) return tl::unexpected(layout.error());
  silence_protobuf_logs();
  // A start-up check may take longer than a request's deadline.
  auto checked = redis::Connection::open(url, std::max(1.0, config.client.timeout_seconds));
  if (!checked) return tl::unexpected(checked.error());
  if (auto ping = checked->pipeline({{"PING"}}); !ping || (*ping)[0].error) {
    return make_error(Error::Code::kIo, "feature store " + url.redacted() + ": PING failed: " +
                                            (!ping ? ping.error().message : *(*ping)[0].error));
  }
  return std::make_unique<RedisStore>(url, std::move(*layout), config, workers, std::move(loop_of));
}

RedisStore::RedisStore(redis::Url url, Layout layout, StoreConfig config, std::size_t workers,
                       std::function<boost::asio::io_context&(std::size_t)> loop_of)
    : url_(std::move(url)),
      layout_(std::move(layout)),
      config_(config),
      user_fields_(layout_.user().hmget_fields()),
      item_fields_(layout_.item().hmget_fields()),
      loop_of_(std::move(loop_of)) {
  for (std::size_t w = 0; w < workers; ++w) workers_.push_back(std::make_unique<Worker>());
}

RedisStore::~RedisStore() = default;

void RedisStore::start_worker(std::size_t worker) {
  Worker& w = *workers_[worker];
  w.client = std::make_unique<redis::Client>(loop_of_(worker), url_, config_.client);
  w.published.store(w.client.get(), std::memory_order_release);
}

void RedisStore::fetch(std::size_t index, const features::Request& request, const std::vector<std::int64_t>& cached,
                       std::function<void(Result<features::Fetched>&&)> done) {
  Worker& worker = *workers_[index];
  auto asked = std::make_shared<Asked>();
  asked->done = std::move(done);
  asked->fetched.items.resize(request.items.size());
  std::vector<redis::Command> commands;
  // An id the entity key cannot hold (not an int64 for an INT64 join key)
  // cannot be stored: it is simply missing.
  if (!request.user.id.empty()) {
    if (auto key = layout_.user().redis_key(request.user.id)) {
      commands.push_back(hmget(*key, user_fields_));
      asked->user = true;
      asked->user_id = request.user.id;
    }
  }
  for (std::size_t i = 0; i < request.items.size(); ++i) {
    if (!cached.empty() && cached[i] >= 0) continue;
    const std::string& id = request.items[i].id;
    auto key = layout_.item().redis_key(id);
    if (!key) continue;
    commands.push_back(hmget(*key, item_fields_));
    asked->items.push_back(i);
    asked->item_ids.push_back(id);
  }
  if (commands.empty()) {
    asked->done(std::move(asked->fetched));
    return;
  }
  worker.client->pipeline(commands, [this, asked](redis::Outcome&& outcome) { answer(*asked, std::move(outcome)); });
}

Result<features::Fetched> RedisStore::fail(features::Fetched&& partial, const std::string& message) {
  if (config_.fail_on_error) {
    return make_error(Error::Code::kUnavailable, message + " (--on-feature-store-error fail)", "feature_store");
  }
  degraded_.fetch_add(1, std::memory_order_relaxed);
  partial.degraded = true;
  return std::move(partial);
}

void RedisStore::answer(Asked& asked, redis::Outcome&& outcome) {
  if (outcome.failure) {
    errors_[static_cast<std::size_t>(*outcome.failure)].fetch_add(1, std::memory_order_relaxed);
    asked.done(fail(std::move(asked.fetched), outcome.message));
    return;
  }
  const auto wall = std::chrono::system_clock::now();
  std::optional<std::string> unreadable;
  auto decode = [&](const EntityLayout& entity, const std::string& id,
                    const redis::Reply& reply) -> std::shared_ptr<const features::Features> {
    Result<features::Features> features =
        reply.error ? make_error(Error::Code::kInvalidArgument, "entity '" + id + "': " + *reply.error)
                    : Layout::decode(entity, id, reply.elements, config_.max_age_seconds, wall);
    if (!features) {
      if (!unreadable) unreadable = "feature store " + url_.redacted() + ": " + features.error().message;
      return nullptr;
    }
    return features->empty() ? nullptr : std::make_shared<const features::Features>(std::move(*features));
  };
  std::size_t next = 0;
  if (asked.user) asked.fetched.user = decode(layout_.user(), asked.user_id, outcome.replies[next++]);
  for (std::size_t k = 0; k < asked.items.size(); ++k) {
    asked.fetched.items[asked.items[k]] = decode(layout_.item(), asked.item_ids[k], outcome.replies[next++]);
  }
  if (unreadable) {
    errors_[kUnreadable].fetch_add(1, std::memory_order_relaxed);
    asked.done(fail(std::move(asked.fetched), *unreadable));
    return;
  }
  asked.done(std::move(asked.fetched));
}

features::RemoteStoreStats RedisStore::stats() const {
  features::RemoteStoreStats out;
  out.store = url_.redacted();
  for (std::size_t kind = 0; kind <= kUnreadable; ++kind) {
    out.errors.emplace_back(kind_name(kind), errors_[kind].load(std::memory_order_relaxed));
  }
  out.degraded = degraded_.load(std::memory_order_relaxed);
  for (const auto& worker : workers_) {
    const redis::Client* client = worker->published.load(std::memory_order_acquire);
    out.breakers.push_back(client ? redis::to_string(client->breaker()) : "closed");
    out.connected.push_back(client != nullptr && client->connected());
  }
  return out;
}

}  // namespace numaserve::feast
