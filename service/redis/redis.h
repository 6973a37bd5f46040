#pragma once
// Redis for the feature store: where it is (a URL), a blocking connection
// (the loader and the start-up check) and an asynchronous client that runs
// on one worker's event loop. Only this folder knows hiredis; client.cpp is
// the one file outside the transport (http/) that knows Boost.Asio, because
// the client must wait on the same loop as the worker's connections.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numaserve/common/names.h"
#include "numaserve/common/result.h"
#include "redis/breaker.h"
#include "redis/config.h"

namespace boost::asio {
class io_context;
}

namespace numaserve::redis {

// redis://[[user]:password@]host[:port][/db] or unix:///path/redis.sock[?db=N].
struct Url {
  bool unix_socket = false;
  std::string host;  // or the socket's path
  int port = 6379;
  std::string user;
  std::string password;
  int db = 0;
  // The URL as logs and errors show it: never the password.
  std::string redacted() const;
};
// A Redis URL of either kind, or a cluster's (cluster.h): what the feature store reads.
bool is_url(std::string_view text);
// Errors say what is wrong without repeating the password.
Result<Url> parse_url(std::string_view text);
// The URL with its password from a file (a mounted secret: the first line,
// without its line end), when `password_file` is not empty.
Result<Url> parse_url(std::string_view text, const std::string& password_file);

// Why a pipeline failed; the label of numaserve_feature_store_errors_total.
enum class Failure { kTimeout, kDisconnected, kRefused, kBreakerOpen, kOverloaded };
inline constexpr auto kFailureNames =
    make_names<Failure>({{Failure::kTimeout, "timeout"}, {Failure::kDisconnected, "disconnected"}, {Failure::kRefused, "refused"},
                         {Failure::kBreakerOpen, "breaker_open"}, {Failure::kOverloaded, "overloaded"}});
inline constexpr int kFailureKinds = static_cast<int>(kFailureNames.table.size());

// One reply: an array reply's elements, or a scalar reply as one element;
// nullopt for a nil. `error` is an error reply's text (the elements are then
// empty). An array nested in an array (CLUSTER SLOTS) is element i's
// `children[i]`; `children` is empty when no element is an array, as in
// every HMGET's reply. `failure`: no reply came, the command's server failed
// (a cluster's other masters answered theirs); `error` then says why.
struct Reply {
  std::vector<std::optional<std::string>> elements;
  std::optional<std::string> error;
  std::vector<Reply> children;
  std::optional<Failure> failure;
};
using Command = std::vector<std::string>;
// A command's reply, by the command's place in its pipeline.
using EachReply = std::function<void(std::size_t command, const Reply& reply)>;

// Blocking, with a timeout on connecting and on each reply.
class Connection {
 public:
  // Connects, authenticates and selects the db; errors name url.redacted().
  static Result<Connection> open(const Url& url, double timeout_seconds);
  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  ~Connection();
  // Sends every command, then reads every reply: one round trip.
  Result<std::vector<Reply>> pipeline(const std::vector<Command>& commands);

 private:
  struct Impl;
  explicit Connection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A pipeline's outcome: its replies, or why there are none. A cluster's
// outcome may be partial: replies whose master failed carry the failure,
// and `failure` is then the first of them.
struct Outcome {
  std::vector<Reply> replies;
  std::optional<Failure> failure;
  std::string message;  // with a failure: for the log and the 503's body
};

// Where a worker's pipelines go: one server (Client) or a cluster
// (ClusterClient, cluster.h). Used only from the loop's thread, but for
// breaker() and connected(), which /metrics reads from any thread.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // Sends the commands as one pipeline; `done` runs once on the loop, by the
  // deadline: with every reply, or with the failure. Taken by value: a
  // cluster keeps them for the redirects. `each`, when given, may see a
  // command's final reply before `done` (which still carries it): a
  // cluster's masters answer at different times, and the caller's work on
  // the first replies overlaps the wait for the last.
  virtual void pipeline(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each) = 0;
  virtual BreakerState breaker() const = 0;
  virtual bool connected() const = 0;
};

// One connection on one event loop, used only from that loop's thread.
// It connects at once and reconnects with backoff by itself; pipelines
// asked for while it is down fail at once (kDisconnected).
class Client final : public Endpoint {
 public:
  Client(boost::asio::io_context& loop, Url url, ClientConfig config);
  ~Client() override;  // pending pipelines are dropped unanswered
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Its replies come together: `done` alone gives them.
  void pipeline(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each) override;
  // The same, for a caller that keeps its commands (a cluster, for its
  // redirects): hiredis copies them into its buffer at once.
  void send(const std::vector<Command>& commands, std::function<void(Outcome&&)> done);
  // Runs `then(true)` once the connection is up (at once when it is), or
  // `then(false)` when the attempt under way fails, and at once when none
  // is (the client waits out its backoff). For a cluster's retry on a node
  // it has just met, the promoted replica: its first connection is worth
  // the wait; a redial of a node that just failed is not.
  void when_up(std::function<void(bool up)> then);

  BreakerState breaker() const override { return breaker_.state(); }
  bool connected() const override { return connected_.load(std::memory_order_relaxed); }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // its timers' handlers hold it weakly
  // Read by /metrics from other threads.
  Breaker breaker_;
  std::atomic<bool> connected_{false};
};

}  // namespace numaserve::redis
