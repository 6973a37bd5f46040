#pragma once
// Redis Cluster, as a client sees it: the startup nodes (a URL), each key's
// hash slot, the slot map a node gives (CLUSTER SLOTS), the redirects a node
// answers with (MOVED, ASK), and the clients that follow them — a blocking
// one for the loader and the start-up check, an asynchronous one per worker
// on its event loop (cluster_client.cpp). The parsing here is pure: the fuzz
// target and the unit tests call it without a server.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "numaserve/common/append_only.h"
#include "numaserve/common/names.h"
#include "numaserve/common/result.h"
#include "redis/redis.h"

namespace numaserve::redis {

inline constexpr std::string_view kClusterScheme = "redis+cluster://";
inline constexpr std::size_t kSlots = 16384;

// redis+cluster://[[user]:password@]host:port[,host:port...]: the startup
// nodes (any of the cluster's nodes: the slot map names the rest). No db:
// a cluster has only db 0.
struct ClusterUrl {
  std::vector<Url> nodes;  // each with the user and password
  std::string redacted() const;
};
bool is_cluster_url(std::string_view text);
Result<ClusterUrl> parse_cluster_url(std::string_view text, const std::string& password_file = {});
// Either kind, as --feature-store and `feature-store load --to` take them.
using AnyUrl = std::variant<Url, ClusterUrl>;
Result<AnyUrl> parse_any_url(std::string_view text, const std::string& password_file);

// The slot Redis Cluster stores `key` in: CRC16 (XMODEM) of the key, or of
// its hash tag — what lies between the first '{' and the first '}' after
// it, when that is not empty — modulo 16384.
std::uint16_t key_slot(std::string_view key);

struct NodeAddress {
  std::string host;
  int port = 0;
  std::string text() const;  // host:port, as metrics and redirects name a node
  bool operator==(const NodeAddress&) const = default;
};
// How to reach one of the cluster's nodes: the startup URL's user and
// password (every node of a cluster has the same), the node's address.
Url node_url(const ClusterUrl& url, const NodeAddress& node);

// Slots first..last and the nodes that hold them, the master first.
struct SlotRange {
  std::uint16_t first = 0, last = 0;
  NodeAddress master;
  std::vector<NodeAddress> replicas;
};
// A CLUSTER SLOTS reply; a node whose address is empty (it does not know
// its own) is `asked`, the node that answered. Refused when malformed or
// when a slot is claimed twice; slots no range names are unserved.
Result<std::vector<SlotRange>> parse_slots(const Reply& reply, const NodeAddress& asked);

// A MOVED or ASK error reply: the slot and the node that serves it now. An
// address without a host (":6380", the node knows no endpoint) is `from`'s host.
struct Redirect {
  enum class Kind { kMoved, kAsk };
  Kind kind;
  std::uint16_t slot = 0;
  NodeAddress to;
};
inline constexpr auto kRedirectNames = make_names<Redirect::Kind>({{Redirect::Kind::kMoved, "moved"}, {Redirect::Kind::kAsk, "ask"}});
std::optional<Redirect> parse_redirect(std::string_view error, const NodeAddress& from);
// Whether an error reply is a redirect (MOVED or ASK): an answer about its
// key, not a refusal by the node.
bool is_redirect(std::string_view error);

// Counters per master, shared by every worker's client and read by /metrics
// from any thread. A node's counters are made the first time a client
// meets it and live as long as the store.
class NodeCounters {
 public:
  struct Counts {
    std::atomic<std::uint64_t> pipelines{0};  // sent to the node (one per request whose keys it holds)
    std::atomic<std::uint64_t> errors{0};     // pipelines or commands it failed
    std::atomic<std::uint64_t> moved{0}, ask{0};  // redirects it answered with
    std::atomic<std::uint64_t> refreshes{0};  // slot maps read from it
  };
  struct Snapshot {
    std::string node;
    std::uint64_t pipelines, errors, moved, ask, refreshes;
  };
  Counts& of(const NodeAddress& node);
  std::vector<Snapshot> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::deque<std::pair<std::string, Counts>> nodes_;  // a deque: references stay valid as it grows
};

// What a client needs to begin: the startup nodes, and the slot map read at
// start (so the first request is routed).
struct ClusterStart {
  ClusterUrl url;
  std::vector<SlotRange> slots;
  NodeAddress read_from;
};

// Blocking, for the loader and the start-up check: reads the slot map from
// the first startup node that answers, then routes each pipeline's commands
// (key: the command's second word) to their masters, one pipeline each,
// following MOVED (the map read again) and ASK, a few times at most.
class ClusterConnection {
 public:
  static Result<ClusterConnection> open(const ClusterUrl& url, double timeout_seconds);
  ClusterConnection(ClusterConnection&&) noexcept;
  ClusterConnection& operator=(ClusterConnection&&) noexcept;
  ~ClusterConnection();
  Result<std::vector<Reply>> pipeline(const std::vector<Command>& commands);
  // PING every master: each must answer (the start-up check).
  Status ping_masters();
  const ClusterStart& start() const;

 private:
  struct Impl;
  explicit ClusterConnection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The asynchronous cluster client of one worker: a Client (its own
// reconnects, deadline, breaker) per master, each request's commands sent as
// one pipeline per master and joined, each reply handed to `each` as its
// master answers. A master that fails fails only its
// commands (Reply::failure); MOVED moves the slot in this client's map, asks
// for the map again (at most every kRefreshSeconds) and retries on the named
// node; ASK sends ASKING and the command to the named node, the map
// unchanged (a few redirects per command at most); a failed or refused (CLUSTERDOWN) master asks for the map
// again. A command whose connection is dead (Failure::kDisconnected: closed,
// reset, refused) waits for that map read and goes to its slot's owner then
// (a failover's promoted replica), when the read can begin before the
// deadline; it fails as before otherwise. The request's deadline holds for
// its retries too. Every kHealthSeconds a master of the map whose connection
// is down asks for the map, and one quiet for kQuietSeconds is PINGed (a
// failed PING asks for the map): a master that died or hung while idle is
// routed around before a request needs it.
class ClusterClient final : public Endpoint {
 public:
  static constexpr double kRefreshSeconds = 0.1;
  // The health check's tick, and how long a master may answer nothing
  // before it is PINGed: the Client's default stall_seconds, so a hung
  // master's unanswered PINGs reach its stall rule (dropped, dialled again)
  // within a tick or two, at one PING per idle master per 2 s per worker.
  static constexpr double kHealthSeconds = 1;
  static constexpr double kQuietSeconds = 2;
  ClusterClient(boost::asio::io_context& loop, const ClusterStart& start, ClientConfig config, NodeCounters& counters);
  ~ClusterClient() override;
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  void pipeline(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each) override;
  // The worst of its masters' breakers; connected when every master is.
  BreakerState breaker() const override;
  bool connected() const override;

  struct Node;
  static constexpr std::size_t kMaxNodes = 1024;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // timers and replies hold it weakly
  // Every node this worker has met, for breaker() and connected() on other threads.
  AppendOnly<Node, kMaxNodes> nodes_;
};

}  // namespace numaserve::redis
