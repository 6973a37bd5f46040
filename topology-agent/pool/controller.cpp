#include "pool/controller.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <set>

#include <nlohmann/json.hpp>

#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "numaserve/common/prometheus.h"
#include "pool/pool.h"

namespace numaserve::agent::pool {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// RFC 3339 with microseconds: a Lease's MicroTime, a condition's Time.
std::string wall_now(bool micro) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (micro) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(us));
    out += frac;
  }
  return out + "Z";
}

struct Counters {
  std::uint64_t reconciles = 0, errors = 0, applied = 0, unchanged = 0, deleted = 0, status_writes = 0;
  std::uint64_t lease_transitions = 0;
  bool leader = false;
};

class Operator {
 public:
  explicit Operator(const OperatorConfig& config)
      : config_(config),
        api_(config.apiserver, kFieldManager),
        election_(config.identity, config.namespace_name, config.lease_name, static_cast<unsigned>(config.lease.count())) {}

  // One step of the leader election; true while this process leads.
  bool lead() {
    const Clock::time_point asked = Clock::now();
    const std::string path = leases() + "/" + config_.lease_name;
    auto current = api_.get(path);
    if (!current || (!current->ok() && current->status != 404)) {
      return lost(current ? current->reason() : current.error().message);
    }
    const json lease = current->status == 404 ? json(nullptr) : current->body;
    auto next = election_.next(lease, Clock::now(), wall_now(true));
    if (!next) return lost("");
    auto wrote = lease.is_null() ? api_.create(leases(), *next) : api_.replace(path, *next);
    if (!wrote || !wrote->ok()) return lost(wrote ? wrote->reason() : wrote.error().message);  // 409: another won
    if (!counters_.leader) {
      ++counters_.lease_transitions;
      log(LogLevel::kInfo, "leading", {{"lease", config_.lease_name}, {"identity", config_.identity}});
    }
    counters_.leader = true;
    renewed_at_ = asked;
    return true;
  }

  // Hands the Lease over at once on shutdown (client-go's ReleaseOnCancel).
  void release() {
    if (!counters_.leader) return;
    const std::string path = leases() + "/" + config_.lease_name;
    auto current = api_.get(path);
    if (!current || !current->ok() || text_field(current->body, {"spec", "holderIdentity"}) != config_.identity) return;
    json lease = current->body;
    lease["spec"]["holderIdentity"] = "";
    lease["spec"]["leaseDurationSeconds"] = 1;
    (void)api_.replace(path, lease);
  }

  void reconcile_all() {
    ++counters_.reconciles;
    const std::string ns = config_.namespace_name;
    auto pools = list("/apis/numaserve.io/v1alpha1/namespaces/" + ns + "/servingpools");
    auto nodes = list("/api/v1/nodes");
    auto nrts = list("/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies");
    if (!pools || !nodes || !nrts) {
      fault(!pools ? pools.error().message : !nodes ? nodes.error().message : nrts.error().message);
      return;
    }
    json plans = json::object();
    const json& items = field(*pools, {"items"});
    for (const json& object : items.is_array() ? items : json::array()) {
      plans[text_field(object, {"metadata", "name"})] = reconcile(object, *nodes, *nrts);
    }
    plans_ = plans.dump(2) + "\n";
  }

  http::Snapshot snapshot() const {
    http::Snapshot s;
    s.plan_json = plans_;
    s.metrics = metrics();
    return s;
  }

 private:
  bool lost(const std::string& why) {
    if (counters_.leader) log(LogLevel::kWarning, "lost the lease", {{"reason", why}});
    if (!why.empty()) fault(why);
    counters_.leader = false;
    return false;
  }

  // Whether this replica may still write: its Lease renewed within two
  // thirds of its duration (client-go's renewDeadline), so that a pass slowed
  // by a hanging API server never writes after another replica took over.
  bool acting() {
    const auto deadline = std::chrono::duration_cast<Clock::duration>(config_.lease * 2) / 3;
    if (counters_.leader && Clock::now() - renewed_at_ < deadline) return true;
    if (counters_.leader) lost("the lease was not renewed within its deadline");
    return false;
  }

  void fault(const std::string& why) {
    ++counters_.errors;
    log(LogLevel::kError, why);
  }

  Result<json> list(const std::string& path) {
    auto reply = api_.get(path);
    if (!reply) return tl::unexpected(reply.error());
    if (!reply->ok()) return make_error(Error::Code::kUnavailable, "GET " + path + ": " + reply->reason(), path);
    return reply->body;
  }

  std::string leases() const {
    return "/apis/coordination.k8s.io/v1/namespaces/" + config_.namespace_name + "/leases";
  }

  // Where a pool's objects of `kind` live: listed, applied and deleted there.
  static std::string collection(const std::string& kind, const std::string& ns) {
    return kind == "Deployment" ? "/apis/apps/v1/namespaces/" + ns + "/deployments"
                                : "/apis/policy/v1/namespaces/" + ns + "/poddisruptionbudgets";
  }

  // One pool: its objects, stale classes, refused pods, status. The plan's
  // JSON (or its error), for /plan.
  json reconcile(const json& object, const json& nodes, const json& nrts) {
    const json& previous = field(object, {"status"});
    auto pool = parse_pool(object);
    if (!pool) return write_status(object, nullptr, nullptr, {}, pool.error().message, previous);
    const std::string selector = std::string("labelSelector=") + kPoolLabel + "%3D" + pool->name;
    auto fleet = fleet_of(nodes, nrts, pool->node_selector);
    Result<fleet::FleetPlan> plan = fleet ? fleet::plan_fleet(*fleet, pool->sizing) : tl::unexpected(fleet.error());
    if (!plan) return write_status(object, &*pool, nullptr, {}, plan.error().message, previous);

    std::map<std::string, ClassState> states;
    auto live = live_objects(*pool, selector);
    if (!live) return write_status(object, &*pool, &*plan, states, live.error().message, previous);
    std::set<std::string> wanted;
    std::string error;
    if (!apply_desired(*pool, *plan, *live, wanted, states, error)) return json(*plan);
    // Classes no node has any more (only after a plan that succeeded: a
    // failed read never empties the pool).
    if (!delete_unwanted(*live, wanted, error)) return json(*plan);
    delete_refused(*pool, selector);
    return write_status(object, &*pool, &*plan, states, error, previous);
  }

  // The pool's Deployments and PDBs as they are: "<collection>/<name>" -> object.
  Result<std::map<std::string, json>> live_objects(const PoolSpec& pool, const std::string& selector) {
    std::map<std::string, json> live;
    for (const char* kind : {"Deployment", "PodDisruptionBudget"}) {
      const std::string path = collection(kind, pool.namespace_name);
      auto items = list(path + "?" + selector);
      if (!items) return tl::unexpected(items.error());
      const json& got = field(*items, {"items"});
      for (const json& item : got.is_array() ? got : json::array()) live[path + "/" + text_field(item, {"metadata", "name"})] = item;
    }
    return live;
  }

  // Applies each object the plan wants that differs from its live copy, and
  // notes the Deployments' ready replicas; `wanted` gets every one's path,
  // `error` the last failure. False when this replica stopped acting.
  bool apply_desired(const PoolSpec& pool, const fleet::FleetPlan& plan, const std::map<std::string, json>& live,
                     std::set<std::string>& wanted, std::map<std::string, ClassState>& states, std::string& error) {
    for (const json& d : desired_objects(pool, plan)) {
      const std::string path = collection(d["kind"], pool.namespace_name) + "/" + d["metadata"]["name"].get<std::string>();
      wanted.insert(path);
      const auto it = live.find(path);
      if (it != live.end() && d["kind"] == "Deployment") {
        states[d["metadata"]["labels"][kClassLabel]] = {integer_field(it->second, {"status", "readyReplicas"})};
      }
      // List items carry no apiVersion and kind: compare what they carry.
      json fields = d;
      fields.erase("apiVersion");
      fields.erase("kind");
      const std::string differs = it == live.end() ? "(new)" : first_difference(it->second, fields);
      if (differs.empty()) {
        ++counters_.unchanged;
        continue;
      }
      if (!acting()) return false;
      auto applied = api_.apply(path, d);
      if (!applied || !applied->ok()) {
        error = "apply " + path + ": " + (applied ? applied->reason() : applied.error().message);
        fault(error);
        continue;
      }
      ++counters_.applied;
      log(LogLevel::kInfo, "applied", {{"object", path}, {"field", differs}});
    }
    return true;
  }

  // Deletes the live objects no class wants; `error` gets the last failure.
  // False when this replica stopped acting.
  bool delete_unwanted(const std::map<std::string, json>& live, const std::set<std::string>& wanted, std::string& error) {
    for (const auto& [path, item] : live) {
      if (wanted.contains(path)) continue;
      if (!acting()) return false;
      auto removed = api_.remove(path);
      if (!removed || (!removed->ok() && removed->status != 404)) {
        error = "delete " + path + ": " + (removed ? removed->reason() : removed.error().message);
        fault(error);
        continue;
      }
      ++counters_.deleted;
      log(LogLevel::kInfo, "deleted", {{"object", path}, {"reason", "its machine class has no node of the pool any more"}});
    }
    return true;
  }

  // The external control loop the Topology Manager asks for: a pod the
  // kubelet refused stays Failed; deleting it lets its ReplicaSet's
  // replacement be scheduled again, at most as often as the node's backoff.
  void delete_refused(const PoolSpec& pool, const std::string& selector) {
    const std::string path = "/api/v1/namespaces/" + pool.namespace_name + "/pods";
    auto pods = list(path + "?" + selector + "&fieldSelector=status.phase%3DFailed");
    if (!pods) return fault(pods.error().message);
    const json& items = field(*pods, {"items"});
    for (const json& pod : items.is_array() ? items : json::array()) {
      if (!refused_at_admission(pod)) continue;
      const std::string node = text_field(pod, {"spec", "nodeName"});
      const std::string reason = text_field(pod, {"status", "reason"});
      if (!refusals_.admit_delete(node, reason, Clock::now())) continue;
      const std::string name = text_field(pod, {"metadata", "name"});
      if (!acting()) return;
      auto removed = api_.remove(path + "/" + name);
      if (!removed || (!removed->ok() && removed->status != 404)) {
        fault("delete pod " + name + ": " + (removed ? removed->reason() : removed.error().message));
        continue;
      }
      log(LogLevel::kWarning, "deleted a pod the kubelet refused",
          {{"pod", name}, {"node", node}, {"reason", reason}, {"message", text_field(pod, {"status", "message"})}});
    }
  }

  json write_status(const json& object, const PoolSpec* pool, const fleet::FleetPlan* plan,
                    const std::map<std::string, ClassState>& states, const std::string& error, const json& previous) {
    if (!error.empty() && pool == nullptr) fault(error);
    PoolSpec fallback;
    fallback.name = text_field(object, {"metadata", "name"});
    fallback.namespace_name = text_field(object, {"metadata", "namespace"});
    fallback.generation = integer_field(object, {"metadata", "generation"});
    const PoolSpec& named = pool ? *pool : fallback;
    if (named.name.empty() || named.namespace_name.empty()) return {{"error", error}};  // nowhere to report it
    const json status =
        pool_status(named, plan, states, refusals_, error, previous, wall_now(false), Clock::now());
    if (!(contains(previous, status) && contains(status, previous)) && acting()) {
      const json patch = {{"apiVersion", kApiVersion},
                          {"kind", "ServingPool"},
                          {"metadata", {{"name", named.name}, {"namespace", named.namespace_name}}},
                          {"status", status}};
      const std::string path =
          "/apis/numaserve.io/v1alpha1/namespaces/" + named.namespace_name + "/servingpools/" + named.name + "/status";
      auto wrote = api_.apply(path, patch);
      if (!wrote || !wrote->ok()) {
        fault("status " + path + ": " + (wrote ? wrote->reason() : wrote.error().message));
      } else {
        ++counters_.status_writes;
      }
    }
    if (plan == nullptr) return {{"error", error}};
    return json(*plan);
  }

  std::string metrics() const {
    std::string out;
    prometheus::TextWriter w(out);
    w.single("numaserve_operator_leader", "gauge", "1 while this replica holds the Lease and acts.",
             counters_.leader ? 1 : 0);
    w.single("numaserve_operator_leader_acquired_total", "counter", "Times this replica took the Lease.",
             counters_.lease_transitions);
    w.single("numaserve_operator_reconciles_total", "counter", "Passes over every pool of the namespace.",
             counters_.reconciles);
    w.single("numaserve_operator_errors_total", "counter", "API server requests that failed after their retries, and bad pools.",
             counters_.errors);
    w.family("numaserve_operator_objects_total", "counter", "Deployments and PDBs, by what a pass did with each.")
        .sample("numaserve_operator_objects_total", counters_.applied, "action=\"applied\"")
        .sample("numaserve_operator_objects_total", counters_.unchanged, "action=\"unchanged\"")
        .sample("numaserve_operator_objects_total", counters_.deleted, "action=\"deleted\"");
    w.single("numaserve_operator_status_writes_total", "counter", "ServingPool status updates sent.",
             counters_.status_writes);
    w.family("numaserve_operator_refused_pods_total", "counter",
             "Pods the kubelet refused at admission, by what was done: deleted, or deferred by the node's backoff.")
        .sample("numaserve_operator_refused_pods_total", refusals_.deleted(), "action=\"deleted\"")
        .sample("numaserve_operator_refused_pods_total", refusals_.deferred(), "action=\"deferred\"");
    w.single("numaserve_operator_apiserver_retries_total", "counter", "API server requests retried after a transient failure.",
             api_.retries());
    return out;
  }

  OperatorConfig config_;
  apiserver::ApiServer api_;
  LeaderElection election_;
  Refusals refusals_;
  Counters counters_;
  std::string plans_;
  Clock::time_point renewed_at_{};
};

}  // namespace

int run_operator(const OperatorConfig& config) {
  log(LogLevel::kInfo, "operator", {{"apiserver", config.apiserver.url}, {"namespace", config.namespace_name},
                                    {"identity", config.identity}});
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int sfd = signalfd(-1, &signals, SFD_CLOEXEC);

  http::StatusServer server;
  if (auto started = server.start(config.endpoint.host, static_cast<int>(config.endpoint.port)); !started) {
    log(LogLevel::kError, started.error().message);
    return 1;
  }
  log(LogLevel::kInfo, "listening", {{"address", config.endpoint.host}, {"port", std::to_string(server.port())}});

  Operator op(config);
  // The Lease is renewed well within its duration; pools are planned every resync.
  const auto step = std::min(config.resync, std::chrono::duration<double>(config.lease) / 3.0);
  Clock::time_point next_pass{};
  for (;;) {
    if (op.lead() && Clock::now() >= next_pass) {
      op.reconcile_all();
      next_pass = Clock::now() + to_duration(config.resync.count());
    }
    server.publish(op.snapshot());
    pollfd p{sfd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(to_duration<std::chrono::milliseconds>(step.count()).count())) > 0) break;
  }
  log(LogLevel::kInfo, "stopping");
  op.release();
  server.stop();
  ::close(sfd);
  return 0;
}

}  // namespace numaserve::agent::pool
