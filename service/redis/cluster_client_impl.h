#pragma once
// Inside the cluster client (cluster.h's ClusterClient): its state, shared by
// the request path (cluster_client.cpp) and the slot map with its health
// checks (cluster_map.cpp). Internal to redis/.

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "redis/cluster.h"

namespace numaserve::redis {
namespace cluster_detail {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

inline constexpr std::uint16_t kNone = 0xffff;
// Redirects followed per command, within its deadline. More than one: while
// a slot's new owner is being told, its two ends can each answer MOVED to
// the other for a few round trips (redis-cli sets the owner on one master
// after another), and a reshard under way can move a slot again. A retry
// after a dead connection counts as one.
inline constexpr std::uint8_t kMaxRedirects = 8;

// Error replies that are the node's state, not the key's: the slot map is
// read again and the command counts as refused.
inline bool cluster_state(const std::string& error) {
  for (const char* prefix : {"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING"}) {
    if (error.starts_with(prefix)) return true;
  }
  return false;
}

}  // namespace cluster_detail

// Node and Impl are ClusterClient's (cluster.h), written with the detail's names.
using namespace cluster_detail;

struct ClusterClient::Node {
  NodeAddress address;
  std::unique_ptr<Client> client;
  NodeCounters::Counts& counts;
  std::atomic<bool> master{false};  // in this worker's slot map
  // The loop thread's alone: when the node last answered (an error reply
  // included), and whether the health check's PING is out.
  Clock::time_point heard = Clock::now();
  bool pinging = false;
};

namespace cluster_detail {

// One request's commands while their masters answer. A command waiting to
// be retried (after a dead connection) is not answered but already holds
// its failure, which the deadline leaves it.
struct Gather {
  Gather(asio::io_context& loop, Clock::time_point at) : until(at), deadline(loop) {}
  std::vector<Reply> replies;
  std::vector<std::uint8_t> answered, redirects;  // per command
  // Pipelines out, and groups waiting for a map read or a connection; held
  // one more while a callback sends, so a failure inside send() cannot
  // finish the request before its other groups are sent.
  std::size_t left = 0;
  bool finished = false;
  std::function<void(Outcome&&)> done;
  EachReply each;
  Clock::time_point until;  // the request's deadline
  asio::steady_timer deadline;
};

}  // namespace cluster_detail

struct ClusterClient::Impl : std::enable_shared_from_this<Impl> {
  Impl(ClusterClient& client, asio::io_context& io, const ClusterStart& start, ClientConfig settings, NodeCounters& c)
      : owner(client), loop(io), url(start.url), config(settings), counters(c), refresh_timer(io), health_timer(io) {
    owner_of.fill(kNone);
  }

  ClusterClient& owner;
  asio::io_context& loop;
  const ClusterUrl url;
  const ClientConfig config;
  NodeCounters& counters;
  std::array<std::uint16_t, kSlots> owner_of{};  // node index per slot
  asio::steady_timer refresh_timer;  // a refresh asked for within kRefreshSeconds of the last waits for it
  bool refresh_waiting = false, refreshing = false;
  Clock::time_point last_refresh{};
  std::size_t next_asked = 0;  // the node the next refresh asks first
  std::uint64_t reads = 0;     // map reads begun
  // Told when map read `read` (or a later one) has ended, adopted or not,
  // or at once when no node can be asked: commands whose connection died.
  struct MapWaiter {
    std::uint64_t read;
    std::function<void()> then;
  };
  std::vector<MapWaiter> after_map;
  asio::steady_timer health_timer;

  // The node at `address`, its client made (connecting) the first time;
  // kNone when kMaxNodes are known.
  std::uint16_t node(const NodeAddress& address);
  void adopt(const std::vector<SlotRange>& slots);
  void refresh();
  void read_map();
  void map_read_ended(std::uint64_t read);
  // Whether a map read that tells a dead connection's commands where to go
  // can begin before `deadline` (one begins at most every kRefreshSeconds).
  bool can_retry(Clock::time_point deadline) const;
  void arm_health();
  void check_health();

  // A request whose keys are all on node `n`: its pipeline's outcome is the
  // request's, unless a reply is a redirect or the node's state: then gather().
  void direct(std::uint16_t n, std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each,
              Clock::time_point deadline);
  // The general path: a pipeline per master, joined, redirects followed.
  void gather(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each,
              Clock::time_point deadline);
  void send(const std::shared_ptr<Gather>& g, std::uint16_t node, std::vector<std::size_t> indices,
            std::vector<Command> commands, bool asking);
  void take(const std::shared_ptr<Gather>& g, std::uint16_t node, const std::vector<std::size_t>& indices,
            const std::vector<Command>& commands, Outcome&& outcome, bool asking);
  // Commands of node `from` whose connection died: they wait for the map
  // read under way or the next one, then retry().
  void park(const std::shared_ptr<Gather>& g, std::uint16_t from, std::vector<std::size_t> indices,
            std::vector<Command> commands, Failure failure, const std::string& message);
  // Each to its slot's owner now: sent if its connection is up, once it is
  // up if it is a node being dialled, parked again if the map still names
  // the dead node (within the deadline and the redirects), failed else.
  void retry(const std::shared_ptr<Gather>& g, std::uint16_t from, std::vector<std::size_t> indices,
             std::vector<Command> commands, Failure failure, const std::string& message);
  void send_once_up(const std::shared_ptr<Gather>& g, std::uint16_t node, std::vector<std::size_t> indices,
                    std::vector<Command> commands, Failure failure, const std::string& message);
  void fail(Gather& g, std::size_t index, Failure failure, const std::string& message);
  std::shared_ptr<Gather> make_gather(std::size_t commands, std::function<void(Outcome&&)> done, EachReply each,
                                      Clock::time_point deadline);
  void arm(const std::shared_ptr<Gather>& g);  // its deadline, unless it is finished
  void finish(const std::shared_ptr<Gather>& g);
};

}  // namespace numaserve::redis
