// The asynchronous cluster client: one Client per node on the worker's
// loop, a request's commands split by master and joined, redirects followed.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "redis/cluster.h"

namespace numaserve::redis {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr std::uint16_t kNone = 0xffff;
// Redirects followed per command, within its deadline. More than one: while
// a slot's new owner is being told, its two ends can each answer MOVED to
// the other for a few round trips (redis-cli sets the owner on one master
// after another), and a reshard under way can move a slot again.
constexpr std::uint8_t kMaxRedirects = 8;

// Error replies that are the node's state, not the key's: the slot map is
// read again and the command counts as refused.
bool cluster_state(const std::string& error) {
  for (const char* prefix : {"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING"}) {
    if (error.starts_with(prefix)) return true;
  }
  return false;
}

}  // namespace

struct ClusterClient::Node {
  NodeAddress address;
  std::unique_ptr<Client> client;
  NodeCounters::Counts& counts;
  std::atomic<bool> master{false};  // in this worker's slot map
};

namespace {

// One request's commands while their masters answer.
struct Gather {
  explicit Gather(asio::io_context& loop) : deadline(loop) {}
  std::vector<Reply> replies;
  std::vector<std::uint8_t> answered, redirects;  // per command
  std::size_t left = 0;  // pipelines out
  bool finished = false;
  std::function<void(Outcome&&)> done;
  EachReply each;
  asio::steady_timer deadline;
};

}  // namespace

struct ClusterClient::Impl : std::enable_shared_from_this<Impl> {
  Impl(ClusterClient& client, asio::io_context& io, const ClusterStart& start, ClientConfig settings, NodeCounters& c)
      : owner(client), loop(io), url(start.url), config(settings), counters(c), refresh_timer(io) {
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

  // The node at `address`, its client made (connecting) the first time;
  // kNone when kMaxNodes are known.
  std::uint16_t node(const NodeAddress& address);
  void adopt(const std::vector<SlotRange>& slots);
  void refresh();
  void read_map();

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
  void fail(Gather& g, std::size_t index, Failure failure, const std::string& message);
  void finish(const std::shared_ptr<Gather>& g);
};

std::uint16_t ClusterClient::Impl::node(const NodeAddress& address) {
  auto& nodes = owner.nodes_;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].address == address) return static_cast<std::uint16_t>(i);
  }
  auto made = std::unique_ptr<Node>(
      new Node{address, std::make_unique<Client>(loop, node_url(url, address), config), counters.of(address)});
  const auto index = nodes.push(std::move(made));
  if (!index) {
    log(LogLevel::kError, "feature store cluster: too many nodes",
        {{"store", url.redacted()}, {"node", address.text()}, {"limit", std::to_string(kMaxNodes)}});
    return kNone;
  }
  return static_cast<std::uint16_t>(*index);
}

void ClusterClient::Impl::adopt(const std::vector<SlotRange>& slots) {
  std::array<std::uint16_t, kSlots> next;
  next.fill(kNone);
  // Each range adds at most one node.
  std::vector<bool> master(owner.nodes_.size() + slots.size(), false);
  for (const auto& range : slots) {
    const std::uint16_t n = node(range.master);
    if (n == kNone) continue;
    master[n] = true;
    std::fill(next.begin() + range.first, next.begin() + range.last + 1, n);
  }
  owner_of = next;
  for (std::size_t i = 0; i < owner.nodes_.size(); ++i) owner.nodes_[i].master.store(i < master.size() && master[i], std::memory_order_relaxed);
}

// At most one read of the map out, and one every kRefreshSeconds: a
// failover's failures, or a reshard's MOVED storm, ask for it per request.
void ClusterClient::Impl::refresh() {
  if (refreshing || refresh_waiting) return;
  const auto at = last_refresh + to_duration(kRefreshSeconds);
  if (Clock::now() >= at) {
    read_map();
    return;
  }
  refresh_waiting = true;
  refresh_timer.expires_at(at);
  refresh_timer.async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    self->refresh_waiting = false;
    self->read_map();
  });
}

// CLUSTER SLOTS from the next connected node (masters and the nodes met
// before, in turn), through its client: its deadline and breaker.
void ClusterClient::Impl::read_map() {
  auto& nodes = owner.nodes_;
  last_refresh = Clock::now();
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const std::size_t i = (next_asked + k) % nodes.size();
    Node& asked = nodes[i];
    if (!asked.client->connected() || asked.client->breaker() != BreakerState::kClosed) continue;
    next_asked = i + 1;
    refreshing = true;
    asked.counts.refreshes.fetch_add(1, std::memory_order_relaxed);
    asked.client->send({{"CLUSTER", "SLOTS"}}, [weak = weak_from_this(), i](Outcome&& outcome) {
      auto self = weak.lock();
      if (!self) return;
      self->refreshing = false;
      const NodeAddress& from = self->owner.nodes_[i].address;
      auto slots = outcome.failure ? make_error(Error::Code::kIo, outcome.message) : parse_slots(outcome.replies.front(), from);
      if (!slots || slots->empty()) {
        log(LogLevel::kWarning, "feature store cluster: slot map not read",
            {{"store", self->url.redacted()}, {"node", from.text()},
             {"error", slots ? "serves no slot" : slots.error().message}});
        return;
      }
      self->adopt(*slots);
    });
    return;
  }
  // No node is up: the next failure asks again (the clients reconnect by themselves).
}

void ClusterClient::Impl::fail(Gather& g, std::size_t index, Failure failure, const std::string& message) {
  if (g.answered[index]) return;
  g.answered[index] = 1;
  Reply& reply = g.replies[index];
  reply = Reply{};
  reply.error = message;
  reply.failure = failure;
}

void ClusterClient::Impl::send(const std::shared_ptr<Gather>& g, std::uint16_t n, std::vector<std::size_t> indices,
                               std::vector<Command> commands, bool asking) {
  Node& target = owner.nodes_[n];
  target.counts.pipelines.fetch_add(1, std::memory_order_relaxed);
  ++g->left;
  if (asking) commands.insert(commands.begin(), Command{"ASKING"});
  // The commands stay with the callback: a redirect sends them on.
  auto kept = std::make_shared<std::vector<Command>>(std::move(commands));
  target.client->send(*kept, [weak = weak_from_this(), g, n, indices = std::move(indices), kept, asking](Outcome&& outcome) {
    auto self = weak.lock();
    if (!self) return;
    self->take(g, n, indices, *kept, std::move(outcome), asking);
  });
}

void ClusterClient::Impl::take(const std::shared_ptr<Gather>& g, std::uint16_t n, const std::vector<std::size_t>& indices,
                               const std::vector<Command>& commands, Outcome&& outcome, bool asking) {
  --g->left;
  Node& from = owner.nodes_[n];
  if (!g->finished) {
    if (outcome.failure) {
      from.counts.errors.fetch_add(1, std::memory_order_relaxed);
      for (const std::size_t i : indices) fail(*g, i, *outcome.failure, outcome.message);
      refresh();  // a master down: its replica may be promoted
    }
    const std::size_t skip = asking ? 1 : 0;  // ASKING's own +OK
    for (std::size_t k = 0; !outcome.failure && k < indices.size(); ++k) {
      const std::size_t i = indices[k];
      Reply& reply = outcome.replies[k + skip];
      const auto redirect = reply.error ? parse_redirect(*reply.error, from.address) : std::nullopt;
      if (redirect && g->redirects[i] < kMaxRedirects) {
        ++g->redirects[i];
        const bool moved = redirect->kind == Redirect::Kind::kMoved;
        (moved ? from.counts.moved : from.counts.ask).fetch_add(1, std::memory_order_relaxed);
        const std::uint16_t to = node(redirect->to);
        if (to != kNone) {
          if (moved) {
            owner_of[redirect->slot] = to;  // at once; the map read confirms the rest
            refresh();
          }
          send(g, to, {i}, {commands[k + skip]}, !moved);
          continue;
        }
      }
      if (reply.error && (redirect || cluster_state(*reply.error))) {
        from.counts.errors.fetch_add(1, std::memory_order_relaxed);
        fail(*g, i, Failure::kRefused, "node " + from.address.text() + ": " + *reply.error);
        refresh();
        continue;
      }
      g->answered[i] = 1;
      g->replies[i] = std::move(reply);
      if (g->each) g->each(i, g->replies[i]);
    }
  }
  if (g->left == 0) finish(g);
}

void ClusterClient::Impl::finish(const std::shared_ptr<Gather>& g) {
  if (g->finished) return;
  g->finished = true;
  g->deadline.cancel();
  Outcome out;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < g->replies.size(); ++i) {
    if (!g->answered[i]) fail(*g, i, Failure::kTimeout, "no answer within " + std::to_string(static_cast<int>(config.timeout_seconds * 1000)) + " ms");
    const Reply& reply = g->replies[i];
    if (!reply.failure) continue;
    if (failed++ == 0) {
      out.failure = reply.failure;
      out.message = "feature store " + url.redacted() + ": " + *reply.error;
    }
  }
  if (failed < g->replies.size()) out.replies = std::move(g->replies);  // else: nothing came back
  auto done = std::move(g->done);
  done(std::move(out));
}

ClusterClient::ClusterClient(asio::io_context& loop, const ClusterStart& start, ClientConfig config, NodeCounters& counters)
    : impl_(std::make_shared<Impl>(*this, loop, start, config, counters)) {
  impl_->adopt(start.slots);
  impl_->last_refresh = Clock::now();
}

ClusterClient::~ClusterClient() {
  impl_->refresh_timer.cancel();
}

void ClusterClient::pipeline(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each) {
  Impl& s = *impl_;
  const auto deadline = Clock::now() + to_duration(s.config.timeout_seconds);
  // A warm item cache leaves a request its user's key alone: one master,
  // whose outcome is the request's.
  const std::uint16_t first = commands.empty() ? kNone : s.owner_of[key_slot(commands[0].at(1))];
  bool one = first != kNone;
  for (std::size_t i = 1; one && i < commands.size(); ++i) one = s.owner_of[key_slot(commands[i].at(1))] == first;
  if (one) {
    s.direct(first, std::move(commands), std::move(done), std::move(each), deadline);
  } else {
    s.gather(std::move(commands), std::move(done), std::move(each), deadline);
  }
}

void ClusterClient::Impl::direct(std::uint16_t n, std::vector<Command> commands, std::function<void(Outcome&&)> done,
                                 EachReply each, Clock::time_point deadline) {
  Node& target = owner.nodes_[n];
  target.counts.pipelines.fetch_add(1, std::memory_order_relaxed);
  auto kept = std::make_shared<std::vector<Command>>(std::move(commands));
  target.client->send(*kept, [weak = weak_from_this(), n, kept, done = std::move(done), each = std::move(each),
                              deadline](Outcome&& outcome) mutable {
    auto self = weak.lock();
    if (!self) return;
    if (outcome.failure) {
      self->owner.nodes_[n].counts.errors.fetch_add(1, std::memory_order_relaxed);
      self->refresh();
      done(std::move(outcome));
      return;
    }
    for (const Reply& reply : outcome.replies) {
      if (!reply.error || !(is_redirect(*reply.error) || cluster_state(*reply.error))) continue;
      // A slot moved, is moving or is down: the general path follows it
      // (its first try meets the same answer), by the same deadline.
      self->gather(std::move(*kept), std::move(done), std::move(each), deadline);
      return;
    }
    done(std::move(outcome));
  });
}

void ClusterClient::Impl::gather(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each,
                                 Clock::time_point deadline) {
  auto g = std::make_shared<Gather>(loop);
  g->replies.resize(commands.size());
  g->answered.assign(commands.size(), 0);
  g->redirects.assign(commands.size(), 0);
  g->done = std::move(done);
  g->each = std::move(each);
  // Group by master, in the order the masters are first met.
  struct Group {
    std::uint16_t node;
    std::vector<std::size_t> indices;  // into the replies
    std::vector<Command> commands;     // the request's, moved: kept for redirects
  };
  std::vector<std::uint16_t> group_of(owner.nodes_.size(), kNone);
  std::vector<Group> groups;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    const std::uint16_t slot = key_slot(commands[i].at(1));
    const std::uint16_t n = owner_of[slot];
    if (n == kNone) {
      fail(*g, i, Failure::kRefused, "slot " + std::to_string(slot) + " is served by no master");
      refresh();
      continue;
    }
    if (group_of[n] == kNone) {
      group_of[n] = static_cast<std::uint16_t>(groups.size());
      groups.push_back({n, {}, {}});
    }
    groups[group_of[n]].indices.push_back(i);
    groups[group_of[n]].commands.push_back(std::move(commands[i]));
  }
  // Counted out before any is sent: a client that fails at once answers inside send().
  g->left = 1;
  for (auto& group : groups) send(g, group.node, std::move(group.indices), std::move(group.commands), false);
  if (--g->left == 0) {
    finish(g);
    return;
  }
  g->deadline.expires_at(deadline);
  g->deadline.async_wait([weak = weak_from_this(), g](error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    self->finish(g);
  });
}

BreakerState ClusterClient::breaker() const {
  BreakerState worst = BreakerState::kClosed;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].master.load(std::memory_order_relaxed)) continue;
    const BreakerState state = nodes_[i].client->breaker();
    if (state == BreakerState::kOpen) return state;
    if (state == BreakerState::kHalfOpen) worst = state;
  }
  return worst;
}

bool ClusterClient::connected() const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].master.load(std::memory_order_relaxed) && !nodes_[i].client->connected()) return false;
  }
  return nodes_.size() > 0;
}

}  // namespace numaserve::redis
