// The cluster client's slot map (cluster_client_impl.h): the nodes met, the
// map read (CLUSTER SLOTS) at most once a kRefreshSeconds and adopted, and
// the masters' connections checked while idle.
#include <algorithm>

#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "redis/cluster_client_impl.h"

namespace numaserve::redis {

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
    const std::uint64_t read = ++reads;
    asked.counts.refreshes.fetch_add(1, std::memory_order_relaxed);
    asked.client->send({{"CLUSTER", "SLOTS"}}, [weak = weak_from_this(), i, read](Outcome&& outcome) {
      auto self = weak.lock();
      if (!self) return;
      self->refreshing = false;
      Node& answered = self->owner.nodes_[i];
      if (!outcome.failure) answered.heard = Clock::now();
      const NodeAddress& from = answered.address;
      auto slots = outcome.failure ? make_error(Error::Code::kIo, outcome.message) : parse_slots(outcome.replies.front(), from);
      if (!slots || slots->empty()) {
        log(LogLevel::kWarning, "feature store cluster: slot map not read",
            {{"store", self->url.redacted()}, {"node", from.text()},
             {"error", slots ? "serves no slot" : slots.error().message}});
      } else {
        self->adopt(*slots);
      }
      self->map_read_ended(read);
    });
    return;
  }
  // No node is up: the next failure asks again (the clients reconnect by
  // themselves); what waits for a map is told now, with the map it has.
  map_read_ended(std::numeric_limits<std::uint64_t>::max());
}

void ClusterClient::Impl::map_read_ended(std::uint64_t read) {
  // Moved out first: a waiter may park its commands again.
  const auto later = std::stable_partition(after_map.begin(), after_map.end(),
                                           [read](const MapWaiter& w) { return w.read > read; });
  std::vector<MapWaiter> ready;
  std::move(later, after_map.end(), std::back_inserter(ready));
  after_map.erase(later, after_map.end());
  for (auto& waiter : ready) waiter.then();
  if (!after_map.empty()) refresh();
}

bool ClusterClient::Impl::can_retry(Clock::time_point deadline) const {
  const auto now = Clock::now();
  // A read under way is waited for; else the next begins now or when the
  // rate allows.
  const auto begins = refreshing ? now : std::max(now, last_refresh + to_duration(kRefreshSeconds));
  return begins < deadline;
}

void ClusterClient::Impl::arm_health() {
  health_timer.expires_after(to_duration(kHealthSeconds));
  health_timer.async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    self->check_health();
    self->arm_health();
  });
}

// A master of the map whose connection is down (its socket closed, reset or
// refused: a SIGKILL, a crash) asks for the map, once a tick while it lasts:
// its replica is promoted a few seconds later, and the read after that
// routes to it. One that has answered nothing for kQuietSeconds is PINGed:
// a hung or partitioned master sends no FIN, and its unanswered PINGs fail
// (asking for the map), count in its breaker and, unanswered for the
// Client's stall_seconds, drop its connection. Map reads keep their rate.
void ClusterClient::Impl::check_health() {
  auto& nodes = owner.nodes_;
  const auto now = Clock::now();
  bool down = false;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (!n.master.load(std::memory_order_relaxed)) continue;
    const BreakerState state = n.client->breaker();
    if (!n.client->connected() || state == BreakerState::kOpen) {
      down = true;  // an open breaker refuses a PING at once: its failures said enough
      continue;
    }
    if (n.pinging || state == BreakerState::kHalfOpen || now - n.heard < to_duration(kQuietSeconds)) continue;
    n.pinging = true;
    n.client->send({{"PING"}}, [weak = weak_from_this(), i](Outcome&& outcome) {
      auto self = weak.lock();
      if (!self) return;
      Node& pinged = self->owner.nodes_[i];
      pinged.pinging = false;
      if (!outcome.failure) {
        pinged.heard = Clock::now();
        return;
      }
      pinged.counts.errors.fetch_add(1, std::memory_order_relaxed);
      log(LogLevel::kWarning, "feature store cluster: master failed its health check",
          {{"store", self->url.redacted()}, {"node", pinged.address.text()}, {"error", outcome.message}});
      self->refresh();
    });
  }
  if (down) refresh();
}

}  // namespace numaserve::redis
