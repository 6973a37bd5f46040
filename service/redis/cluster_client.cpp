// The asynchronous cluster client: one Client per node on the worker's
// loop, a request's commands split by master and joined, redirects followed,
// commands whose connection died sent again to their slot's owner, and the
// masters' connections checked while idle.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <iterator>
#include <limits>
#include <numeric>

#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "redis/cluster_client_impl.h"

namespace numaserve::redis {

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

void ClusterClient::Impl::park(const std::shared_ptr<Gather>& g, std::uint16_t from, std::vector<std::size_t> indices,
                               std::vector<Command> commands, Failure failure, const std::string& message) {
  for (const std::size_t i : indices) {
    ++g->redirects[i];
    Reply& reply = g->replies[i];
    reply = Reply{};
    reply.error = message;
    reply.failure = failure;
  }
  ++g->left;
  // The read under way may tell; else the next, which refresh() begins.
  after_map.push_back({refreshing ? reads : reads + 1,
                       [weak = weak_from_this(), g, from, indices = std::move(indices), commands = std::move(commands),
                        failure, message]() mutable {
                         if (auto self = weak.lock()) self->retry(g, from, std::move(indices), std::move(commands), failure, message);
                       }});
  refresh();
}

void ClusterClient::Impl::retry(const std::shared_ptr<Gather>& g, std::uint16_t from, std::vector<std::size_t> indices,
                                std::vector<Command> commands, Failure failure, const std::string& message) {
  if (!g->finished) {
    struct Group {
      std::uint16_t node;
      std::vector<std::size_t> indices;
      std::vector<Command> commands;
    };
    std::vector<Group> groups;
    std::vector<std::size_t> again;
    std::vector<Command> again_commands;
    const bool time_left = can_retry(g->until);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::size_t i = indices[k];
      const std::uint16_t n = owner_of[key_slot(commands[k].at(1))];
      if (n == kNone) {
        fail(*g, i, failure, message);
        continue;
      }
      if (n == from && !owner.nodes_[n].client->connected()) {
        // The map still names the dead node (not promoted yet, or the read
        // was begun before): the next read may know better.
        if (time_left && g->redirects[i] < kMaxRedirects) {
          again.push_back(i);
          again_commands.push_back(std::move(commands[k]));
        } else {
          fail(*g, i, failure, message);
        }
        continue;
      }
      auto group = std::find_if(groups.begin(), groups.end(), [n](const Group& x) { return x.node == n; });
      if (group == groups.end()) group = groups.insert(groups.end(), Group{n, {}, {}});
      group->indices.push_back(i);
      group->commands.push_back(std::move(commands[k]));
    }
    for (auto& group : groups) {
      if (owner.nodes_[group.node].client->connected()) {
        for (const std::size_t i : group.indices) g->replies[i] = Reply{};  // sent: a deadline now is a timeout
        send(g, group.node, std::move(group.indices), std::move(group.commands), false);
      } else {
        send_once_up(g, group.node, std::move(group.indices), std::move(group.commands), failure, message);
      }
    }
    if (!again.empty()) park(g, from, std::move(again), std::move(again_commands), failure, message);
  }
  if (--g->left == 0) finish(g);  // park()'s count, held until the groups are out
}

void ClusterClient::Impl::send_once_up(const std::shared_ptr<Gather>& g, std::uint16_t n, std::vector<std::size_t> indices,
                                       std::vector<Command> commands, Failure failure, const std::string& message) {
  ++g->left;
  owner.nodes_[n].client->when_up([weak = weak_from_this(), g, n, indices = std::move(indices),
                                   commands = std::move(commands), failure, message](bool up) mutable {
    auto self = weak.lock();
    if (!self) return;
    if (!g->finished) {
      if (up) {
        for (const std::size_t i : indices) g->replies[i] = Reply{};
        self->send(g, n, std::move(indices), std::move(commands), false);
      } else {
        for (const std::size_t i : indices) self->fail(*g, i, failure, message);
      }
    }
    if (--g->left == 0) self->finish(g);
  });
}

void ClusterClient::Impl::take(const std::shared_ptr<Gather>& g, std::uint16_t n, const std::vector<std::size_t>& indices,
                               const std::vector<Command>& commands, Outcome&& outcome, bool asking) {
  Node& from = owner.nodes_[n];
  if (!outcome.failure) from.heard = Clock::now();
  const std::size_t skip = asking ? 1 : 0;  // ASKING's own +OK
  if (!g->finished && outcome.failure) {
    from.counts.errors.fetch_add(1, std::memory_order_relaxed);
    // A dead connection (closed, reset, refused): its commands wait for a
    // map read and go to their slot's owner then, when there is time.
    const bool dead = *outcome.failure == Failure::kDisconnected && can_retry(g->until);
    std::vector<std::size_t> again;
    std::vector<Command> again_commands;
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::size_t i = indices[k];
      if (dead && g->redirects[i] < kMaxRedirects) {
        again.push_back(i);
        again_commands.push_back(commands[k + skip]);
      } else {
        fail(*g, i, *outcome.failure, outcome.message);
      }
    }
    if (again.empty()) {
      refresh();  // a master down: its replica may be promoted
    } else {
      park(g, n, std::move(again), std::move(again_commands), *outcome.failure, outcome.message);
    }
  } else if (!g->finished) {
    for (std::size_t k = 0; k < indices.size(); ++k) {
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
  if (--g->left == 0) finish(g);  // held until the redirects and retries are out
}

void ClusterClient::Impl::finish(const std::shared_ptr<Gather>& g) {
  if (g->finished) return;
  g->finished = true;
  g->deadline.cancel();
  Outcome out;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < g->replies.size(); ++i) {
    if (!g->answered[i] && !g->replies[i].failure) {
      fail(*g, i, Failure::kTimeout, "no answer within " + std::to_string(static_cast<int>(config.timeout_seconds * 1000)) + " ms");
    }
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
  impl_->arm_health();
}

ClusterClient::~ClusterClient() {
  impl_->refresh_timer.cancel();
  impl_->health_timer.cancel();
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
    Node& sent_to = self->owner.nodes_[n];
    if (outcome.failure) {
      sent_to.counts.errors.fetch_add(1, std::memory_order_relaxed);
      if (*outcome.failure == Failure::kDisconnected && self->can_retry(deadline)) {
        // Its connection died: every command waits for the map read, as
        // on the general path, which answers from here on.
        auto g = self->make_gather(kept->size(), std::move(done), std::move(each), deadline);
        std::vector<std::size_t> all(kept->size());
        std::iota(all.begin(), all.end(), std::size_t{0});
        self->park(g, n, std::move(all), std::move(*kept), *outcome.failure, outcome.message);
        self->arm(g);
        return;
      }
      self->refresh();
      done(std::move(outcome));
      return;
    }
    sent_to.heard = Clock::now();
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

std::shared_ptr<Gather> ClusterClient::Impl::make_gather(std::size_t commands, std::function<void(Outcome&&)> done,
                                                         EachReply each, Clock::time_point deadline) {
  auto g = std::make_shared<Gather>(loop, deadline);
  g->replies.resize(commands);
  g->answered.assign(commands, 0);
  g->redirects.assign(commands, 0);
  g->done = std::move(done);
  g->each = std::move(each);
  return g;
}

void ClusterClient::Impl::arm(const std::shared_ptr<Gather>& g) {
  if (g->finished) return;
  g->deadline.expires_at(g->until);
  g->deadline.async_wait([weak = weak_from_this(), g](error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    self->finish(g);
  });
}

void ClusterClient::Impl::gather(std::vector<Command> commands, std::function<void(Outcome&&)> done, EachReply each,
                                 Clock::time_point deadline) {
  auto g = make_gather(commands.size(), std::move(done), std::move(each), deadline);
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
  arm(g);
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
