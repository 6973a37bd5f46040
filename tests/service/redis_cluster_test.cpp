// The Redis store on a real Redis Cluster: 3 masters and 3 replicas of
// Debian's redis-server on loopback ports (tests/service/redis_cluster.py,
// cluster-node-timeout 1 s) and the real `numaserve` binary. What a user
// relies on: each key read from the master that holds its slot (the slot the
// server itself computes), scores equal to the embedded store's, no failed
// request while slots move, a killed master costing only its own keys,
// within the deadline, until its replica is promoted, and none once it is.
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "feature_store/feast_format.h"
#include "features/model_spec.h"
#include "redis/cluster.h"
#include "redis_support.h"

namespace {

using namespace numaserve::testing;
namespace redis = numaserve::redis;
namespace feature_store = numaserve::feature_store;

// Every request during a failure is answered in time: the deadline plus a
// forward (of a tiny model) and a generous margin for a loaded CI machine.
// The deadline is 200 ms, not the single server tests' 50: here 4
// connections, two services and six Redis nodes share two CPUs, and a
// spared request must never miss it.
constexpr double kTimeoutSeconds = 0.2;
const std::string kTimeout = "200ms";
constexpr double kAnswerBound = kTimeoutSeconds + 1.0;
// A killed master's replica is promoted after cluster-node-timeout (1 s)
// and an election; the service finds it on its next map read (every 0.1 s
// at most while requests fail, every second while a master's connection is
// down). Measured here: 2-3 s.
constexpr int kPromotionBoundSeconds = 12;

// A Redis Cluster of our own, every node killed with the test.
class Cluster {
 public:
  explicit Cluster(std::string password = {}) : dir_(make_temp_dir("numaserve-cluster")), password_(std::move(password)) {
    const Ran started = run(script() + " start " + dir_.string() + (password_.empty() ? "" : " --password " + password_));
    if (started.status != 0) {
      ADD_FAILURE() << "the cluster did not start: " << started.output;
      return;
    }
    const json ports = json::parse(started.output.substr(started.output.find('{')));
    ports_ = ports["ports"].get<std::vector<int>>();
  }
  ~Cluster() {
    run(script() + " stop " + dir_.string());
    fs::remove_all(dir_);
  }
  // Two startup nodes, as a deployment names a few of its nodes.
  std::string url() const {
    return "redis+cluster://127.0.0.1:" + std::to_string(ports_.at(0)) + ",127.0.0.1:" + std::to_string(ports_.at(1));
  }
  std::string cli(int port, const std::string& args) const {
    const std::string auth = password_.empty() ? "" : " --no-auth-warning -a " + password_;
    return run("redis-cli -p " + std::to_string(port) + auth + " " + args).output;
  }
  // The masters serving slots now, by their CLUSTER NODES line: id -> port,
  // slot ranges. Not asked of `except` (a stopped node would never answer).
  struct Master {
    std::string id;
    int port;
    std::vector<std::pair<int, int>> slots;
  };
  std::vector<Master> masters(int except = 0) const {
    std::vector<Master> out;
    for (const int port : ports_) {
      if (port == except) continue;
      std::istringstream lines(cli(port, "CLUSTER NODES"));
      for (std::string line; std::getline(lines, line);) {
        const auto w = words(line);
        if (w.size() < 9 || w[2].find("master") == std::string::npos || w[2].find("fail") != std::string::npos) continue;
        Master m{w[0], std::stoi(w[1].substr(w[1].find(':') + 1)), {}};
        for (std::size_t i = 8; i < w.size(); ++i) {
          if (w[i].front() == '[') continue;  // a slot being migrated
          const auto dash = w[i].find('-');
          const int first = std::stoi(w[i]);
          m.slots.emplace_back(first, dash == std::string::npos ? first : std::stoi(w[i].substr(dash + 1)));
        }
        if (!m.slots.empty()) out.push_back(m);
      }
      if (!out.empty()) return out;  // one live node's view is enough
    }
    return out;
  }
  const Master& master_of(const std::vector<Master>& masters, int slot) const {
    for (const auto& m : masters) {
      for (const auto& [first, last] : m.slots) {
        if (slot >= first && slot <= last) return m;
      }
    }
    ADD_FAILURE() << "slot " << slot << " has no master";
    return masters.front();
  }
  // The port of a replica in sync with master `id`; 0 when none is.
  int replica_of(const std::string& id) const {
    for (const int port : ports_) {
      std::istringstream lines(cli(port, "CLUSTER NODES"));
      for (std::string line; std::getline(lines, line);) {
        const auto w = words(line);
        if (w.size() >= 8 && w[2].find("slave") != std::string::npos && w[2].find("fail") == std::string::npos && w[3] == id) {
          return std::stoi(w[1].substr(w[1].find(':') + 1));
        }
      }
    }
    return 0;
  }
  pid_t pid(int port) const {
    const std::string info = cli(port, "INFO server");
    const auto at = info.find("process_id:");
    return at == std::string::npos ? -1 : std::stoi(info.substr(at + 11));
  }
  const std::vector<int>& ports() const { return ports_; }

 private:
  static std::string script() { return std::string(NUMASERVE_SOURCE_DIR) + "/tests/service/redis_cluster.py"; }
  static std::vector<std::string> words(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string word; in >> word;) out.push_back(word);
    return out;
  }
  fs::path dir_;
  std::string password_;
  std::vector<int> ports_;
};

// Where the demo store's entities live in Redis: their keys as Feast writes
// them for ranker_a, and each key's slot as this client computes it.
class Keys {
 public:
  Keys() {
    auto spec = numaserve::features::read_model_spec((demo_dir() / "ranker_a").string());
    EXPECT_TRUE(spec) << spec.error().message;
    spec_ = std::move(*spec);
    auto layout = feature_store::Layout::build({&spec_});
    EXPECT_TRUE(layout) << layout.error().message;
    layout_ = std::make_unique<feature_store::Layout>(std::move(*layout));
  }
  std::string user(const std::string& id) const { return *layout_->user().redis_key(id); }
  std::string item(const std::string& id) const { return *layout_->item().redis_key(id); }

 private:
  numaserve::features::ModelSpec spec_;
  std::unique_ptr<feature_store::Layout> layout_;
};

int slot_of(const std::string& key) { return redis::key_slot(key); }

// Scores of requests served together share a forward, whose batch size
// moves the last bits: equal within 1e-5, where a default in place of a
// stored feature moves a score by far more.
bool same_scores(const json& a, const json& b) {
  if (!a.is_array() || !b.is_array() || a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i].get<double>() - b[i].get<double>()) > 1e-5) return false;
  }
  return true;
}

// Requests from `threads` connections until stopped, each answer checked.
class Load {
 public:
  Load(int port, std::vector<std::string> bodies, std::vector<json> healthy, int threads = 4) {
    for (int t = 0; t < threads; ++t) {
      workers_.emplace_back([this, port, bodies, healthy, t] {
        for (std::size_t n = t; !stop_; ++n) {
          const std::size_t b = n % bodies.size();
          const Answer a = post(port, bodies[b]);
          ++answered_;
          if (a.status != 200) {
            std::lock_guard lock(mutex_);
            failures_.push_back(std::to_string(a.status) + " " + a.body);
          } else if (!same_scores(json::parse(a.body)["scores"], healthy[b])) {
            if (differed_++ == 0) {
              std::lock_guard lock(mutex_);
              first_difference_ = "request " + bodies[b] + ": " + a.body + " instead of " + healthy[b].dump();
            }
          }
          if (a.seconds > kAnswerBound) ++late_;
        }
      });
    }
  }
  ~Load() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& w : workers_) {
      if (w.joinable()) w.join();
    }
  }
  int answered() const { return answered_; }
  int late() const { return late_; }
  int differed() const { return differed_; }
  std::string first_difference() const {
    std::lock_guard lock(mutex_);
    return first_difference_;
  }
  std::vector<std::string> failures() const {
    std::lock_guard lock(mutex_);
    return failures_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0}, late_{0}, differed_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> failures_;
  std::string first_difference_;
  std::vector<std::thread> workers_;
};

// The store's failures by kind and the service's warnings: what a test
// that saw degraded answers prints.
std::string failures_seen(int port, const std::string& url, const fs::path& log) {
  std::string out;
  for (const char* kind : {"timeout", "disconnected", "refused", "breaker_open", "overloaded", "unreadable"}) {
    out += std::string(kind) + "=" + std::to_string(metric(port, counter("numaserve_feature_store_errors_total", url, "kind=\"" + std::string(kind) + "\""))) + " ";
  }
  std::istringstream lines(slurp(log));
  for (std::string line; std::getline(lines, line);) {
    if (line.find("level=warning") != std::string::npos || line.find("level=error") != std::string::npos) out += "\n" + line;
  }
  return out;
}

// A counter of one node (host 127.0.0.1, `node_port`) in the service's /metrics; -1 while the service has not met the node.
double node_counter(int port, const std::string& url, const std::string& family, int node_port) {
  return metric(port, counter(family, url, "node=\"127.0.0.1:" + std::to_string(node_port) + "\""));
}

// `count` requests, each asking for the user and two items on master
// `victim` and for six items on the others: a request that meets a dead
// `victim` has keys to lose, and others to keep.
std::vector<std::string> touching(const Cluster& cluster, const std::vector<Cluster::Master>& masters,
                                  const Cluster::Master& victim, int count) {
  const Keys keys;
  auto on_victim = [&](const std::string& key) { return cluster.master_of(masters, slot_of(key)).id == victim.id; };
  std::vector<std::string> users, items, others;
  for (int u = 0; u < 60; ++u) {
    if (on_victim(keys.user("u" + std::to_string(u)))) users.push_back("u" + std::to_string(u));
  }
  for (int i = 0; i < 200; ++i) (on_victim(keys.item("i" + std::to_string(i))) ? items : others).push_back("i" + std::to_string(i));
  std::vector<std::string> out;
  if (users.empty() || items.size() < 2 || others.size() < 6) {
    ADD_FAILURE() << "the demo store's keys are not spread over the masters";
    return out;
  }
  for (int r = 0; r < count; ++r) {
    std::vector<std::string> ids = {items[r % items.size()], items[(r + 1) % items.size()]};
    for (int k = 0; k < 6; ++k) ids.push_back(others[(r * 6 + k) % others.size()]);
    out.push_back(request(users[r % users.size()], ids));
  }
  return out;
}

// Waits for a master other than `victim` to serve `slot` (its replica
// promoted), in the view of the nodes but the victim; that master's port,
// or 0 after kPromotionBoundSeconds.
int promoted(const Cluster& cluster, int slot, int victim) {
  for (const auto until = Clock::now() + std::chrono::seconds(kPromotionBoundSeconds); Clock::now() < until;) {
    for (const auto& m : cluster.masters(victim)) {
      for (const auto& [first, last] : m.slots) {
        if (m.port != victim && slot >= first && slot <= last) return m.port;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

// Waits up to `seconds` for `ready`; whether it came.
template <class Ready>
bool within(double seconds, Ready ready) {
  for (const auto until = Clock::now() + std::chrono::duration<double>(seconds); Clock::now() < until;) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ready();
}

double redirects(int port, const std::string& url, const std::vector<Cluster::Master>& masters, const std::string& kind) {
  double sum = 0;
  for (const auto& m : masters) {
    sum += std::max(0.0, metric(port, counter("numaserve_feature_store_redirects_total", url,
                                              "node=\"127.0.0.1:" + std::to_string(m.port) + "\",kind=\"" + kind + "\"")));
  }
  return sum;
}

TEST(RedisCluster, EveryKeysSlotIsTheOneTheServerComputes) {
  const Cluster cluster;
  ASSERT_FALSE(cluster.ports().empty());
  redis::Url node;
  node.host = "127.0.0.1";
  node.port = cluster.ports().front();
  auto connection = redis::Connection::open(node, 5);
  ASSERT_TRUE(connection) << connection.error().message;
  const Keys keys;
  // Feast's keys of every demo entity, Redis's documented examples (hash
  // tags among them) and random binary keys.
  std::vector<std::string> all = {"123456789", "{user1000}.following", "{user1000}.followers", "foo{}{bar}",
                                  "foo{{bar}}zap", "foo{bar}{zap}", "{}", "{", "}{", "", std::string("a\0b{\0}", 7)};
  for (int u = 0; u < 60; ++u) all.push_back(keys.user("u" + std::to_string(u)));
  for (int i = 0; i < 200; ++i) all.push_back(keys.item("i" + std::to_string(i)));
  std::mt19937 random(7);
  for (int k = 0; k < 300; ++k) {
    std::string key(random() % 40, '\0');
    for (auto& c : key) c = static_cast<char>(random() % 8 == 0 ? "{}"[random() % 2] : random() % 256);
    all.push_back(key);
  }
  std::vector<redis::Command> asked;
  for (const auto& key : all) asked.push_back({"CLUSTER", "KEYSLOT", key});
  auto replies = connection->pipeline(asked);
  ASSERT_TRUE(replies) << replies.error().message;
  for (std::size_t k = 0; k < all.size(); ++k) {
    ASSERT_FALSE((*replies)[k].error) << *(*replies)[k].error;
    EXPECT_EQ(std::to_string(redis::key_slot(all[k])), *(*replies)[k].elements.at(0)) << "key #" << k;
  }
}

TEST(RedisCluster, ScoresEqualTheEmbeddedStoreWithTheSameFeatures) {
  const Cluster cluster;
  ASSERT_FALSE(cluster.ports().empty());
  load(cluster.url());
  // Every master holds some of the store: the keys are spread, not on one node.
  for (const auto& m : cluster.masters()) EXPECT_NE(cluster.cli(m.port, "DBSIZE"), "0\n") << m.port;
  const Serving embedded = serve((demo_dir() / "store.jsonl").string());
  const Serving remote = serve(cluster.url());
  ASSERT_GT(remote.pid, 0) << slurp(remote.log);
  for (int r = 0; r < 12; ++r) {
    const std::string body = request(r == 11 ? "nobody" : "u" + std::to_string(r * 4), some_items(r * 13, 40));
    const json want = scores(embedded.port, body);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(scores(remote.port, body), want) << body;  // fetched, then from the item cache
    EXPECT_EQ(scores(remote.port, body), want) << body;
  }
  // Features sent with the request override the store's, as with one server.
  json inline_body = json::parse(request("u3", {"i5", "i6", "i404"}));
  inline_body["user"]["features"] = {{"age", 80}};
  inline_body["items"][1]["features"] = {{"price", 1.5}};
  EXPECT_EQ(scores(remote.port, inline_body.dump()), scores(embedded.port, inline_body.dump()));
  EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_degraded_total", cluster.url())), 0);
  for (const auto& m : cluster.masters()) {
    EXPECT_GT(metric(remote.port, counter("numaserve_feature_store_node_pipelines_total", cluster.url(),
                                          "node=\"127.0.0.1:" + std::to_string(m.port) + "\"")), 0) << m.port;
  }
  EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_connected", cluster.url(), "worker=\"0\"")), 1);

  // A cluster nobody listens at is an error at start naming it.
  const int nobody = free_port();
  const auto refused = run("timeout 20 " + binary() + " serve --model-dir " + (demo_dir() / "ranker_a").string() +
                           " --feature-store redis+cluster://127.0.0.1:" + std::to_string(nobody) + " --port 0 --workers 1");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find("no node gave the slot map"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("127.0.0.1:" + std::to_string(nobody)), std::string::npos) << refused.output;
}

// A cluster with a password (requirepass on every node): the password file
// opens every master's connection, the loader's and the workers'; a wrong
// one is an error at start naming the cluster, never the password.
TEST(RedisCluster, APasswordFileOpensEveryMasterAndAWrongPasswordIsAClearStartUpError) {
  const Cluster cluster("s3cret-cluster");
  ASSERT_FALSE(cluster.ports().empty());
  const fs::path dir = make_temp_dir("numaserve-cluster-pw");
  std::ofstream(dir / "password") << "s3cret-cluster\n";
  std::ofstream(dir / "wrong") << "not-the-pw\n";
  load(cluster.url(), demo_dir() / "store.jsonl", "--password-file " + (dir / "password").string());
  const Serving remote = serve(cluster.url(), {"--feature-store-password-file", (dir / "password").string()});
  ASSERT_GT(remote.pid, 0) << slurp(remote.log);
  const Serving embedded = serve((demo_dir() / "store.jsonl").string());
  const std::string body = request("u8", some_items(2, 30));
  EXPECT_EQ(scores(remote.port, body), scores(embedded.port, body));
  const std::string redacted = "redis+cluster://:****@" + cluster.url().substr(std::string("redis+cluster://").size());
  EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_degraded_total", redacted)), 0);

  const auto refused = run("timeout 20 " + binary() + " serve --model-dir " + (demo_dir() / "ranker_a").string() +
                           " --feature-store '" + cluster.url() + "' --feature-store-password-file " +
                           (dir / "wrong").string() + " --port 0 --workers 1");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find(cluster.url().substr(std::string("redis+cluster://").size())), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("AUTH refused"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("not-the-pw"), std::string::npos) << refused.output;
  fs::remove_all(dir);
}

// Slots move while 4 connections ask for their keys: first one slot by hand
// with the commands `redis-cli --cluster reshard` sends (so requests meet
// its keys mid-migration: ASK), then a third of a master's slots with
// redis-cli itself (MOVED). No request fails and every score stays right.
TEST(RedisCluster, ReshardingUnderLoadFailsNoRequest) {
  const Cluster cluster;
  ASSERT_FALSE(cluster.ports().empty());
  load(cluster.url());
  const Serving remote = serve(cluster.url(), {"--feature-query-timeout", kTimeout, "--item-cache-ttl", "0"});
  ASSERT_GT(remote.pid, 0) << slurp(remote.log);
  std::vector<std::string> bodies;
  std::vector<json> healthy;
  for (int r = 0; r < 8; ++r) {
    bodies.push_back(request("u" + std::to_string(r * 7), some_items(r * 11, 30)));
    healthy.push_back(scores(remote.port, bodies.back()));
  }
  const auto before = cluster.masters();
  ASSERT_EQ(before.size(), 3u);
  const Keys keys;
  // The slot of an item every request asks for, and the master to move it to.
  const std::string item = some_items(0, 1)[0];
  for (auto& body : bodies) {
    json b = json::parse(body);
    b["items"].push_back({{"id", item}});
    body = b.dump();
  }
  const int slot = slot_of(keys.item(item));
  const auto& from = cluster.master_of(before, slot);
  // And the item with a user on the same master: one master for the whole
  // request (the path a warm item cache leaves most requests), until the
  // item's slot leaves.
  std::string neighbour;
  for (int u = 0; u < 60 && neighbour.empty(); ++u) {
    if (cluster.master_of(before, slot_of(keys.user("u" + std::to_string(u)))).id == from.id) neighbour = "u" + std::to_string(u);
  }
  ASSERT_FALSE(neighbour.empty());
  bodies.push_back(request(neighbour, {item}));
  healthy.emplace_back();
  for (std::size_t b = 0; b < bodies.size(); ++b) healthy[b] = scores(remote.port, bodies[b]);
  const auto& to = before[&from == &before[0] ? 1 : 0];
  const std::string key = keys.item(item);

  Load load(remote.port, bodies, healthy);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string s = std::to_string(slot);
  EXPECT_EQ(cluster.cli(to.port, "CLUSTER SETSLOT " + s + " IMPORTING " + from.id), "OK\n");
  EXPECT_EQ(cluster.cli(from.port, "CLUSTER SETSLOT " + s + " MIGRATING " + to.id), "OK\n");
  // The key moves; until the slot does, its old master answers ASK.
  redis::Url source;
  source.host = "127.0.0.1";
  source.port = from.port;
  auto connection = redis::Connection::open(source, 5);
  ASSERT_TRUE(connection);
  auto moved_key = connection->pipeline({{"MIGRATE", "127.0.0.1", std::to_string(to.port), key, "0", "5000"}});
  ASSERT_TRUE(moved_key && !moved_key->front().error) << (moved_key ? *moved_key->front().error : moved_key.error().message);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  // The new owner first, then the old one, then the rest: CLUSTER SETSLOT's
  // documented order.
  cluster.cli(to.port, "CLUSTER SETSLOT " + s + " NODE " + to.id);
  cluster.cli(from.port, "CLUSTER SETSLOT " + s + " NODE " + to.id);
  for (const auto& m : before) {
    if (m.id != to.id && m.id != from.id) cluster.cli(m.port, "CLUSTER SETSLOT " + s + " NODE " + to.id);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  // A third of a master's slots, by redis-cli, one key per MIGRATE.
  const auto& donor = before[2];
  const Ran reshard = run("timeout 120 redis-cli --cluster reshard 127.0.0.1:" + std::to_string(donor.port) +
                          " --cluster-from " + donor.id + " --cluster-to " + before[0].id +
                          " --cluster-slots 1800 --cluster-yes --cluster-pipeline 1");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  load.stop();
  ASSERT_EQ(reshard.status, 0) << reshard.output;
  EXPECT_NE(cluster.master_of(cluster.masters(), slot).id, from.id) << "the slot did not move";
  EXPECT_GT(load.answered(), 50);
  EXPECT_EQ(load.failures(), std::vector<std::string>{});
  EXPECT_EQ(load.differed(), 0) << "answers with other scores while slots moved: " << load.first_difference();
  EXPECT_EQ(load.late(), 0);
  EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_degraded_total", cluster.url())), 0)
      << failures_seen(remote.port, cluster.url(), remote.log);
  EXPECT_GE(redirects(remote.port, cluster.url(), before, "ask"), 1);
  EXPECT_GE(redirects(remote.port, cluster.url(), before, "moved"), 1);
}

// SIGKILL a master while 4 connections send requests: those that ask for
// its keys are answered on the failure policy within the deadline (defaults
// with `default`, 503 with `fail`; never a 500, never late), the others in
// full; once its replica is promoted every request is answered in full.
TEST(RedisCluster, AKilledMasterCostsOnlyItsKeysUntilItsReplicaIsPromoted) {
  const Cluster cluster;
  ASSERT_FALSE(cluster.ports().empty());
  load(cluster.url());
  const std::vector<std::string> policy = {"--feature-query-timeout", kTimeout, "--item-cache-ttl", "0"};
  std::vector<std::string> failing = policy;
  failing.insert(failing.end(), {"--on-feature-store-error", "fail"});
  const Serving remote = serve(cluster.url(), policy);
  const Serving strict = serve(cluster.url(), failing);
  ASSERT_GT(remote.pid, 0) << slurp(remote.log);
  ASSERT_GT(strict.pid, 0) << slurp(strict.log);
  const auto masters = cluster.masters();
  ASSERT_EQ(masters.size(), 3u);
  const Keys keys;
  const auto& victim = masters[0];
  auto on_victim = [&](const std::string& key) { return cluster.master_of(masters, slot_of(key)).id == victim.id; };
  // Bodies whose keys all live elsewhere ("spared"), and ones with a user
  // and items on the victim ("hit").
  std::vector<std::string> spared_users, hit_users, spared_items, hit_items;
  for (int u = 0; u < 60; ++u) (on_victim(keys.user("u" + std::to_string(u))) ? hit_users : spared_users).push_back("u" + std::to_string(u));
  for (int i = 0; i < 200; ++i) (on_victim(keys.item("i" + std::to_string(i))) ? hit_items : spared_items).push_back("i" + std::to_string(i));
  ASSERT_GE(spared_items.size(), 20u);
  ASSERT_GE(hit_items.size(), 5u);
  std::vector<std::string> spared, hit;
  for (int r = 0; r < 4; ++r) {
    spared.push_back(request(spared_users[r], std::vector<std::string>(spared_items.begin() + r * 5, spared_items.begin() + r * 5 + 15)));
    std::vector<std::string> items(spared_items.begin() + r, spared_items.begin() + r + 10);
    items.insert(items.end(), hit_items.begin() + r, hit_items.begin() + r + 1);
    hit.push_back(request(hit_users[r], items));
  }
  std::vector<json> spared_healthy, hit_healthy;
  for (const auto& b : spared) spared_healthy.push_back(scores(remote.port, b));
  for (const auto& b : hit) hit_healthy.push_back(scores(remote.port, b));

  // The spared requests under load: always in full.
  Load load(remote.port, spared, spared_healthy);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(cluster.pid(victim.port), SIGKILL), 0);
  // The hit requests, until they are whole again.
  int hit_answers = 0, hit_late = 0, hit_degraded = 0, strict_503 = 0, strict_other = 0;
  double recovered_after = -1;
  for (std::size_t n = 0; Clock::now() - killed_at < std::chrono::seconds(kPromotionBoundSeconds + 5); ++n) {
    const std::size_t b = n % hit.size();
    const Answer a = post(remote.port, hit[b]);
    ++hit_answers;
    hit_late += a.seconds > kAnswerBound;
    ASSERT_EQ(a.status, 200) << a.body;
    const bool whole = same_scores(json::parse(a.body)["scores"], hit_healthy[b]);
    hit_degraded += !whole;
    const Answer s = post(strict.port, hit[b]);
    hit_late += s.seconds > kAnswerBound;
    if (s.status == 503) {
      ++strict_503;
      EXPECT_EQ(s.retry_after, "1");
      EXPECT_NE(s.body.find("\"field\":\"feature_store\""), std::string::npos) << s.body;
    } else if (s.status != 200) {
      ++strict_other;
    }
    if (whole && s.status == 200 && recovered_after < 0 && hit_degraded > 0) {
      recovered_after = std::chrono::duration<double>(Clock::now() - killed_at).count();
    }
    if (recovered_after >= 0 && Clock::now() - killed_at > std::chrono::duration<double>(recovered_after + 1)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  load.stop();
  std::printf("killed master 127.0.0.1:%d: hit requests whole again after %.2f s (%d answers, %d on defaults, %d 503s)\n",
              victim.port, recovered_after, hit_answers, hit_degraded, strict_503);
  EXPECT_GT(hit_degraded, 0) << "no request met the dead master";
  EXPECT_GT(strict_503, 0);
  EXPECT_EQ(strict_other, 0);
  EXPECT_EQ(hit_late, 0);
  EXPECT_GE(recovered_after, 0) << "not whole again within " << kPromotionBoundSeconds + 5 << " s";
  EXPECT_LE(recovered_after, kPromotionBoundSeconds);
  // After the promotion: every hit request whole, on both services.
  for (std::size_t b = 0; b < hit.size(); ++b) {
    EXPECT_EQ(scores(remote.port, hit[b]), hit_healthy[b]);
    EXPECT_EQ(scores(strict.port, hit[b]), hit_healthy[b]);
  }
  EXPECT_GT(load.answered(), 50);
  EXPECT_EQ(load.failures(), std::vector<std::string>{});
  EXPECT_EQ(load.differed(), 0) << "requests for the live masters' keys lost features: " << load.first_difference();
  EXPECT_EQ(load.late(), 0);
  EXPECT_GE(metric(remote.port, counter("numaserve_feature_store_node_errors_total", cluster.url(),
                                        "node=\"127.0.0.1:" + std::to_string(victim.port) + "\"")), 1);
}

// A failover's stage, before anything fails: a loaded cluster, a server on
// it and one on the embedded store, the first master (the victim) and 20
// requests touching its keys with the embedded store's scores, each
// answered whole by the cluster's server first. `why` is empty when every
// step held.
struct FailoverStage {
  static std::string loaded(const Cluster& cluster) {
    if (!cluster.ports().empty()) load(cluster.url());
    return cluster.url();
  }
  Cluster cluster;
  std::string url = loaded(cluster);
  Serving embedded = serve((demo_dir() / "store.jsonl").string());
  Serving remote = serve(url, {"--feature-query-timeout", kTimeout, "--item-cache-ttl", "0"});
  std::vector<Cluster::Master> masters;
  std::vector<std::string> bodies;
  std::vector<json> want;
  std::string why = "the stage was not set";

  FailoverStage() {
    if (cluster.ports().empty() || remote.pid <= 0) {
      why = "no cluster or no server: " + slurp(remote.log);
      return;
    }
    masters = cluster.masters();
    if (masters.size() != 3) {
      why = std::to_string(masters.size()) + " masters";
      return;
    }
    bodies = touching(cluster, masters, masters[0], 20);
    for (const auto& body : bodies) {
      want.push_back(scores(embedded.port, body));
      if (!same_scores(scores(remote.port, body), want.back())) {
        why = "not whole before the failure: " + body;
        return;
      }
    }
    why = bodies.size() == 20 ? "" : std::to_string(bodies.size()) + " requests touch the victim";
  }
  const Cluster::Master& victim() const { return masters[0]; }
};

// The issue's failover: a master SIGKILLed while no request is in flight,
// its replica promoted, and only then requests for its keys. The worker
// must not learn of the failover from them: its health check saw the
// master's connection go and read the map until the replica was promoted,
// so the replica is met and connected before any request, and every
// request is answered whole, with the embedded store's scores.
TEST(RedisCluster, AMasterKilledWhileIdleCostsNoRequestOnceItsReplicaIsPromoted) {
  const FailoverStage stage;
  ASSERT_EQ(stage.why, "");
  const auto& [cluster, url, embedded, remote, masters, bodies, want, why] = stage;
  const auto& victim = stage.victim();

  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(cluster.pid(victim.port), SIGKILL), 0);
  const int replica = promoted(cluster, victim.slots.front().first, victim.port);
  ASSERT_GT(replica, 0) << "no replica promoted within " << kPromotionBoundSeconds << " s";
  // No request yet: the promoted replica met (its counters made) and every
  // master of the worker's map connected again, by the health check alone.
  EXPECT_TRUE(within(5, [&] {
    return node_counter(remote.port, url, "numaserve_feature_store_node_pipelines_total", replica) >= 0 &&
           metric(remote.port, counter("numaserve_feature_store_connected", url, "worker=\"0\"")) == 1;
  })) << failures_seen(remote.port, url, remote.log);
  // As in the issue: the first requests more than 4 s after the kill.
  std::this_thread::sleep_until(killed_at + std::chrono::seconds(4));
  int whole = 0;
  for (std::size_t b = 0; b < bodies.size(); ++b) {
    const Answer a = post(remote.port, bodies[b]);
    ASSERT_EQ(a.status, 200) << a.body;
    const bool same = same_scores(json::parse(a.body)["scores"], want[b]);
    whole += same;
    EXPECT_TRUE(same) << bodies[b] << ": " << a.body << " instead of " << want[b].dump();
  }
  EXPECT_EQ(whole, 20);
  EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_degraded_total", url)), 0)
      << failures_seen(remote.port, url, remote.log);
  EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_errors_total", url, "kind=\"disconnected\"")), 0);
  EXPECT_GT(node_counter(remote.port, url, "numaserve_feature_store_node_pipelines_total", replica), 0);
}

// A master that hangs (SIGSTOP: its sockets stay open, no FIN, no reply)
// while idle: only the PINGs of the health check can tell. They fail, the
// map is read again, and once the replica is promoted the worker routes to
// it before a request comes; a request would otherwise wait out its
// deadline on the hung master and be answered on defaults.
TEST(RedisCluster, AMasterThatHangsWhileIdleIsFoundByItsHealthCheck) {
  const FailoverStage stage;
  ASSERT_EQ(stage.why, "");
  const auto& [cluster, url, embedded, remote, masters, bodies, want, why] = stage;
  const auto& victim = stage.victim();
  const double errors_before = node_counter(remote.port, url, "numaserve_feature_store_node_errors_total", victim.port);

  const pid_t pid = cluster.pid(victim.port);
  // Killed before the services stop, however the test ends: not left hung
  // under their shutdown.
  struct KillAtEnd {
    pid_t stopped;
    ~KillAtEnd() { kill(stopped, SIGKILL); }
  } const kill_at_end{pid};
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const int replica = promoted(cluster, victim.slots.front().first, victim.port);
  EXPECT_GT(replica, 0) << "no replica promoted within " << kPromotionBoundSeconds << " s";
  // The hung master's PINGs failed (its errors) and a map read since met
  // the replica: no request was sent meanwhile.
  const bool found = replica > 0 && within(10, [&] {
    return node_counter(remote.port, url, "numaserve_feature_store_node_errors_total", victim.port) > errors_before &&
           node_counter(remote.port, url, "numaserve_feature_store_node_pipelines_total", replica) >= 0 &&
           metric(remote.port, counter("numaserve_feature_store_connected", url, "worker=\"0\"")) == 1;
  });
  EXPECT_TRUE(found) << failures_seen(remote.port, url, remote.log);
  EXPECT_NE(slurp(remote.log).find("master failed its health check"), std::string::npos) << slurp(remote.log);
  if (found) {
    for (std::size_t b = 0; b < bodies.size(); ++b) {
      const Answer a = post(remote.port, bodies[b]);
      ASSERT_EQ(a.status, 200) << a.body;
      EXPECT_TRUE(same_scores(json::parse(a.body)["scores"], want[b])) << bodies[b] << ": " << a.body;
    }
    EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_degraded_total", url)), 0)
        << failures_seen(remote.port, url, remote.log);
  }
}

// The request that meets the dead connection itself: the master SIGKILLed
// and its replica promoted at once (CLUSTER FAILOVER TAKEOVER, no failure
// detection to wait for), then requests straight away, before the health
// check's next tick can read the map (it ticks once a second: the few
// milliseconds between the takeover and the first request rarely hold
// one). The command that finds the master's connection dead waits for the
// map read it asks for and is sent to the promoted replica within its
// deadline: every answer whole.
TEST(RedisCluster, ACommandOnADeadConnectionIsRetriedOnItsSlotsPromotedReplica) {
  const FailoverStage stage;
  ASSERT_EQ(stage.why, "");
  const auto& [cluster, url, embedded, remote, masters, bodies, want, why] = stage;
  const auto& victim = stage.victim();
  const int replica = cluster.replica_of(victim.id);
  ASSERT_GT(replica, 0);

  ASSERT_EQ(kill(cluster.pid(victim.port), SIGKILL), 0);
  ASSERT_EQ(cluster.cli(replica, "CLUSTER FAILOVER TAKEOVER"), "OK\n");
  int late = 0;
  for (std::size_t b = 0; b < bodies.size(); ++b) {
    const Answer a = post(remote.port, bodies[b]);
    late += a.seconds > kAnswerBound;
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_TRUE(same_scores(json::parse(a.body)["scores"], want[b])) << bodies[b] << ": " << a.body;
  }
  EXPECT_EQ(late, 0);
  EXPECT_EQ(metric(remote.port, counter("numaserve_feature_store_degraded_total", url)), 0)
      << failures_seen(remote.port, url, remote.log);
  // Which path saved them: a request meeting the dead connection counts a
  // node error (the retry), a health-check read first counts none.
  std::printf("dead master 127.0.0.1:%d: %.0f pipelines failed on it and were retried on 127.0.0.1:%d\n", victim.port,
              std::max(0.0, node_counter(remote.port, url, "numaserve_feature_store_node_errors_total", victim.port)),
              replica);
}

// A master SIGKILLed while 4 connections ask for its keys: its pipelines in
// flight and the requests that follow wait for map reads (retries) but
// never past their deadline; until the promotion they are answered on the
// failure policy, after it whole.
TEST(RedisCluster, AMasterKilledUnderLoadHoldsNoRequestPastItsDeadline) {
  const Cluster cluster;
  ASSERT_FALSE(cluster.ports().empty());
  load(cluster.url());
  const std::string url = cluster.url();
  const Serving remote = serve(url, {"--feature-query-timeout", kTimeout, "--item-cache-ttl", "0"});
  ASSERT_GT(remote.pid, 0) << slurp(remote.log);
  const auto masters = cluster.masters();
  ASSERT_EQ(masters.size(), 3u);
  const auto& victim = masters[0];
  const auto bodies = touching(cluster, masters, victim, 8);
  ASSERT_EQ(bodies.size(), 8u);
  std::vector<json> healthy;
  for (const auto& body : bodies) healthy.push_back(scores(remote.port, body));

  Load load(remote.port, bodies, healthy);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(cluster.pid(victim.port), SIGKILL), 0);
  const int replica = promoted(cluster, victim.slots.front().first, victim.port);
  EXPECT_GT(replica, 0) << "no replica promoted within " << kPromotionBoundSeconds << " s";
  std::this_thread::sleep_for(std::chrono::seconds(2));
  load.stop();
  EXPECT_GT(load.answered(), 50);
  EXPECT_EQ(load.failures(), std::vector<std::string>{});  // defaults, never a 5xx
  EXPECT_EQ(load.late(), 0);
  for (std::size_t b = 0; b < bodies.size(); ++b) {
    EXPECT_TRUE(same_scores(scores(remote.port, bodies[b]), healthy[b])) << bodies[b];
  }
  EXPECT_GE(node_counter(remote.port, url, "numaserve_feature_store_node_errors_total", victim.port), 1);
}

}  // namespace
