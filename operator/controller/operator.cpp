#include "controller/operator.h"

#include <algorithm>
#include <ctime>

#include "numaserve/common/log.h"
#include "numaserve/common/prometheus.h"
#include "pool/compare.h"
#include "pool/fields.h"
#include "pool/objects.h"

namespace numaserve::op::controller {
namespace {

using nlohmann::json;
using pool::field;
using pool::integer_field;
using pool::text_field;

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

// The kinds of a pool's objects, in the order they are applied.
constexpr const char* kKinds[] = {"Deployment", "PodDisruptionBudget", "Service", "HTTPRoute", "HorizontalPodAutoscaler"};

// Where a pool's objects of `kind` live: listed, applied and deleted there.
std::string collection(const std::string& kind, const std::string& ns) {
  if (kind == "Deployment") return "/apis/apps/v1/namespaces/" + ns + "/deployments";
  if (kind == "PodDisruptionBudget") return "/apis/policy/v1/namespaces/" + ns + "/poddisruptionbudgets";
  if (kind == "HorizontalPodAutoscaler") return "/apis/autoscaling/v2/namespaces/" + ns + "/horizontalpodautoscalers";
  if (kind == "Service") return "/api/v1/namespaces/" + ns + "/services";
  return "/apis/gateway.networking.k8s.io/v1/namespaces/" + ns + "/httproutes";
}

// Where an object of the pool's lives: "<collection>/<name>", the key of
// the live objects and the path it is applied and deleted at.
std::string path_of(const json& object, const std::string& ns) {
  return collection(object["kind"], ns) + "/" + object["metadata"]["name"].get<std::string>();
}

// Each class's ready replicas: its live Deployment's, by its class label.
std::map<std::string, std::int64_t> ready_replicas(const std::map<std::string, json>& live, const std::string& ns) {
  std::map<std::string, std::int64_t> out;
  const std::string deployments = collection("Deployment", ns) + "/";
  for (const auto& [path, item] : live) {
    const std::string class_name = text_field(item, {"metadata", "labels", pool::kClassLabel});
    if (path.starts_with(deployments) && !class_name.empty()) out[class_name] = integer_field(item, {"status", "readyReplicas"});
  }
  return out;
}

}  // namespace

Operator::Operator(const OperatorConfig& config)
    : config_(config),
      api_(config.apiserver, pool::kFieldManager),
      election_(config.identity, config.namespace_name, config.lease_name, static_cast<unsigned>(config.lease.count())) {}

// Every failure is kUnavailable, so that kNotAllowed means only "no longer leading".
Status Operator::checked(const Result<kube::apiserver::Reply>& reply, const std::string& what, bool missing_ok) {
  if (reply && (reply->ok() || (missing_ok && reply->status == 404))) return {};
  ++counters_.failed_replies[reply ? reply->status : 0];
  if (!reply) return make_error(Error::Code::kUnavailable, what + ": " + reply.error().message, what);
  return make_error(Error::Code::kUnavailable, what + ": " + reply->reason(), what);
}

bool Operator::lead() {
  const Clock::time_point asked = Clock::now();
  const std::string path = leases() + "/" + config_.lease_name;
  auto current = api_.get(path);
  if (auto read = checked(current, "GET " + path, true); !read) return lost(read.error().message);
  const json lease = current->status == 404 ? json(nullptr) : current->body;
  auto next = election_.next(lease, Clock::now(), wall_now(true));
  if (!next) return lost("");
  // 409: another replica wrote the Lease first, and leads.
  if (auto wrote = checked(lease.is_null() ? api_.create(leases(), *next) : api_.replace(path, *next), "write " + path);
      !wrote) {
    return lost(wrote.error().message);
  }
  if (!counters_.leader) {
    ++counters_.lease_transitions;
    log(LogLevel::kInfo, "leading", {{"lease", config_.lease_name}, {"identity", config_.identity}});
  }
  counters_.leader = true;
  renewed_at_ = asked;
  return true;
}

void Operator::release() {
  if (!counters_.leader) return;
  const std::string path = leases() + "/" + config_.lease_name;
  auto current = api_.get(path);
  if (!current || !current->ok() || text_field(current->body, {"spec", "holderIdentity"}) != config_.identity) return;
  json lease = current->body;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  (void)api_.replace(path, lease);
}

void Operator::reconcile_all() {
  ++counters_.reconciles;
  pass_failed_ = false;
  auto pools = list("/apis/numaserve.io/v1alpha1/namespaces/" + config_.namespace_name + "/servingpools");
  if (!pools) return fault(pools.error().message);
  auto nodes = list("/api/v1/nodes");
  auto nrts = list("/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies");
  // The fleet not read whole: no plan, nothing written but each pool's
  // Degraded condition, saying which read failed.
  const auto* unread = !nodes ? &nodes : !nrts ? &nrts : nullptr;
  if (unread != nullptr) fault(unread->error().message);
  const json topologies = unread == nullptr ? with_remembered(*nodes, *nrts) : json();
  json plans = json::object();
  const json& items = field(*pools, {"items"});
  for (const json& object : items.is_array() ? items : json::array()) {
    json plan;
    if (unread == nullptr) {
      plan = reconcile(object, *nodes, topologies);
    } else {
      pool::PassReport pass;
      pass.error = unread->error().message;
      pass.fault = "ApiServerError";
      pass.read_failed = true;
      plan = report(object, nullptr, nullptr, pass);
    }
    plans[text_field(object, {"metadata", "name"})] = plan;
  }
  plans_ = plans.dump(2) + "\n";
  if (!pass_failed_) {
    counters_.last_success = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  }
}

json Operator::with_remembered(const json& nodes, const json& nrts) {
  std::set<std::string> present;
  const json& node_items = field(nodes, {"items"});
  for (const json& node : node_items.is_array() ? node_items : json::array()) {
    present.insert(text_field(node, {"metadata", "name"}));
  }
  std::erase_if(topologies_, [&](const auto& kv) { return !present.contains(kv.first); });
  json out = nrts;
  if (!out["items"].is_array()) out["items"] = json::array();
  std::set<std::string> read;
  for (const json& nrt : out["items"]) {
    const std::string name = text_field(nrt, {"metadata", "name"});
    read.insert(name);
    if (present.contains(name)) topologies_[name] = nrt;
  }
  remembered_.clear();
  for (const auto& [name, nrt] : topologies_) {
    if (read.contains(name)) continue;
    out["items"].push_back(nrt);
    remembered_.insert(name);
  }
  if (!remembered_.empty()) {
    log(LogLevel::kWarning, "planned from remembered NodeResourceTopology objects",
        {{"nodes", std::to_string(remembered_.size())}, {"first", *remembered_.begin()},
         {"reason", "their Nodes exist but their NodeResourceTopology objects are gone"}});
  }
  return out;
}

kube::http::Snapshot Operator::snapshot() const {
  kube::http::Snapshot s;
  s.plan_json = plans_;
  s.metrics = metrics();
  return s;
}

bool Operator::lost(const std::string& why) {
  if (counters_.leader) log(LogLevel::kWarning, "lost the lease", {{"reason", why}});
  if (!why.empty()) fault(why);
  counters_.leader = false;
  return false;
}

// Whether this replica may still write: its Lease renewed within two thirds
// of its duration (client-go's renewDeadline), so that a pass slowed by a
// hanging API server never writes after another replica took over.
Status Operator::acting() {
  const auto deadline = std::chrono::duration_cast<Clock::duration>(config_.lease * 2) / 3;
  if (counters_.leader && Clock::now() - renewed_at_ < deadline) return {};
  if (counters_.leader) lost("the lease was not renewed within its deadline");
  return make_error(Error::Code::kNotAllowed, "not leading: the pass stops writing");
}

void Operator::fault(const std::string& why) {
  ++counters_.errors;
  pass_failed_ = true;
  log(LogLevel::kError, why);
}

void Operator::failed(pool::PassReport& pass, const std::string& why, const char* reason) {
  fault(why);
  pass.error = why;
  pass.fault = reason;
}

Result<json> Operator::list(const std::string& path, bool missing_is_empty) {
  auto reply = api_.get(path);
  if (missing_is_empty && reply && reply->status == 404) return json::object();
  if (auto read = checked(reply, "GET " + path); !read) return tl::unexpected(read.error());
  return reply->body;
}

std::string Operator::leases() const {
  return "/apis/coordination.k8s.io/v1/namespaces/" + config_.namespace_name + "/leases";
}

// One pool: its objects, stale classes, refused pods, status. The plan's
// JSON (or its error), for /plan. A failed read never deletes anything.
json Operator::reconcile(const json& object, const json& nodes, const json& nrts) {
  pool::PassReport pass;
  auto spec = pool::parse_pool(object);
  if (!spec) {
    failed(pass, spec.error().message, "InvalidPool");
    return report(object, nullptr, nullptr, pass);
  }
  auto fleet = pool::fleet_of(nodes, nrts, spec->node_selector);
  auto plan = fleet ? kube::fleet::plan_fleet(*fleet, spec->sizing) : tl::unexpected(fleet.error());
  if (!plan) {
    failed(pass, plan.error().message, "NoPlan");
    return report(object, &*spec, nullptr, pass);
  }
  const std::string selector = std::string("labelSelector=") + pool::kPoolLabel + "%3D" + spec->name;
  auto live = live_objects(*spec, selector);
  if (!live) {
    failed(pass, live.error().message, "ApiServerError");
    pass.read_failed = true;
    return report(object, &*spec, &*plan, pass);
  }
  pass.ready = ready_replicas(*live, spec->namespace_name);
  for (const auto& c : plan->classes) {
    for (const auto& node : c.nodes) {
      if (remembered_.contains(node)) pass.remembered_topologies.push_back(node);
    }
  }
  const std::set<std::string> held = pool::held_classes(nodes, spec->node_selector, *plan);
  pool::PassObjects objects = pool::pass_objects(*spec, *plan, pass.ready, held);
  if (objects.route_refused) failed(pass, objects.route_refused->message, "InvalidPool");
  std::vector<json>& desired = objects.desired;
  std::set<std::string> wanted;
  for (const json& d : desired) wanted.insert(path_of(d, spec->namespace_name));
  if (objects.keep_route) wanted.insert(collection("HTTPRoute", spec->namespace_name) + "/" + spec->name);
  // Stopped leading: no more writes this pass, the status included.
  if (!apply_desired(desired, *live, spec->namespace_name, pass) || !delete_unwanted(*live, wanted, held, pass)) {
    return json(*plan);
  }
  if (auto refused = delete_refused(*spec, selector); !refused && refused.error().code == Error::Code::kNotAllowed) {
    return json(*plan);
  }
  return report(object, &*spec, &*plan, pass);
}

Result<Operator::Live> Operator::live_objects(const pool::PoolSpec& spec, const std::string& selector) {
  Live live;
  for (const char* kind : kKinds) {
    const std::string path = collection(kind, spec.namespace_name);
    // No Gateway API in the cluster: no HTTPRoute of the pool's to find
    // (one it asks for then fails to apply, saying so).
    auto items = list(path + "?" + selector, std::string(kind) == "HTTPRoute");
    if (!items) return tl::unexpected(items.error());
    const json& got = field(*items, {"items"});
    for (const json& item : got.is_array() ? got : json::array()) live[path + "/" + text_field(item, {"metadata", "name"})] = item;
  }
  return live;
}

// Applies each wanted object that differs from its live copy; a failed
// apply is the pass's error, and the others still go. An error only when
// this replica stopped leading.
Status Operator::apply_desired(const std::vector<json>& desired, const Live& live, const std::string& ns,
                               pool::PassReport& pass) {
  for (const json& d : desired) {
    const std::string path = path_of(d, ns);
    const auto it = live.find(path);
    // List items carry no apiVersion and kind: compare what they carry.
    json fields = d;
    fields.erase("apiVersion");
    fields.erase("kind");
    const std::string differs = it == live.end() ? "(new)" : pool::first_difference(it->second, fields);
    if (differs.empty()) {
      ++counters_.unchanged;
      continue;
    }
    if (auto may = acting(); !may) return may;
    if (auto applied = checked(api_.apply(path, d), "apply " + path); !applied) {
      failed(pass, applied.error().message, "ApiServerError");
      continue;
    }
    ++counters_.applied;
    ++pass.applied;
    log(LogLevel::kInfo, "applied", {{"object", path}, {"field", differs}});
  }
  return {};
}

// Deletes the live objects no pass wants (their class has no node of the
// pool any more, or the spec no longer asks for them: an HPA with
// autoscaling off); as apply_desired, an error only when no longer leading.
Status Operator::delete_unwanted(const Live& live, const std::set<std::string>& wanted, const std::set<std::string>& held,
                                 pool::PassReport& pass) {
  for (const auto& [path, item] : live) {
    if (wanted.contains(path)) continue;
    if (const std::string class_name = text_field(item, {"metadata", "labels", pool::kClassLabel}); held.contains(class_name)) {
      ++counters_.held;
      if (std::find(pass.held_classes.begin(), pass.held_classes.end(), class_name) == pass.held_classes.end()) {
        pass.held_classes.push_back(class_name);
        log(LogLevel::kWarning, "kept the objects of a class without a topology",
            {{"class", class_name}, {"reason", "a Node still has its label but no NodeResourceTopology was read"}});
      }
      continue;
    }
    if (auto may = acting(); !may) return may;
    if (auto removed = checked(api_.remove(path), "delete " + path, true); !removed) {
      failed(pass, removed.error().message, "ApiServerError");
      continue;
    }
    ++counters_.deleted;
    log(LogLevel::kInfo, "deleted",
        {{"object", path}, {"reason", "no pass wants it: its class has no node of the pool, or the spec no longer asks for it"}});
  }
  return {};
}

// The external control loop the Topology Manager asks for: a pod the
// kubelet refused stays Failed; deleting it lets its ReplicaSet's
// replacement be scheduled again, at most as often as the node's backoff.
Status Operator::delete_refused(const pool::PoolSpec& spec, const std::string& selector) {
  const std::string path = "/api/v1/namespaces/" + spec.namespace_name + "/pods";
  auto pods = list(path + "?" + selector + "&fieldSelector=status.phase%3DFailed");
  if (!pods) {
    fault(pods.error().message);
    return tl::unexpected(pods.error());
  }
  const json& items = field(*pods, {"items"});
  for (const json& pod : items.is_array() ? items : json::array()) {
    if (!pool::refused_at_admission(pod)) continue;
    const std::string node = text_field(pod, {"spec", "nodeName"});
    const std::string reason = text_field(pod, {"status", "reason"});
    if (!refusals_.admit_delete(node, reason, Clock::now())) continue;
    const std::string name = text_field(pod, {"metadata", "name"});
    if (auto may = acting(); !may) return may;
    if (auto removed = checked(api_.remove(path + "/" + name), "delete pod " + name, true); !removed) {
      fault(removed.error().message);
      continue;
    }
    log(LogLevel::kWarning, "deleted a pod the kubelet refused",
        {{"pod", name}, {"node", node}, {"reason", reason}, {"message", text_field(pod, {"status", "message"})}});
  }
  return {};
}

// The pool's status, written when it changed; the plan's JSON (or the
// error) for /plan. A pool that did not parse is reported by its name.
json Operator::report(const json& object, const pool::PoolSpec* spec, const kube::fleet::FleetPlan* plan,
                      const pool::PassReport& pass) {
  pool::PoolSpec named;
  if (spec != nullptr) {
    named = *spec;
  } else {
    named.name = text_field(object, {"metadata", "name"});
    named.namespace_name = text_field(object, {"metadata", "namespace"});
    named.generation = integer_field(object, {"metadata", "generation"});
  }
  if (!named.name.empty() && !named.namespace_name.empty()) {
    const json& previous = field(object, {"status"});
    const json status = pool::pool_status(named, plan, pass, refusals_, previous, wall_now(false), Clock::now());
    if (!(pool::contains(previous, status) && pool::contains(status, previous)) && acting()) {
      if (auto wrote = write_status(named, status); !wrote) fault(wrote.error().message);
    }
  }
  if (plan == nullptr) return {{"error", pass.error}};
  return json(*plan);
}

Status Operator::write_status(const pool::PoolSpec& spec, const json& status) {
  const json patch = {{"apiVersion", pool::kApiVersion},
                      {"kind", "ServingPool"},
                      {"metadata", {{"name", spec.name}, {"namespace", spec.namespace_name}}},
                      {"status", status}};
  const std::string path =
      "/apis/numaserve.io/v1alpha1/namespaces/" + spec.namespace_name + "/servingpools/" + spec.name + "/status";
  if (auto wrote = checked(api_.apply(path, patch), "status " + path); !wrote) return wrote;
  ++counters_.status_writes;
  return {};
}

std::string Operator::metrics() const {
  std::string out;
  prometheus::TextWriter w(out);
  w.single("numaserve_operator_leader", "gauge", "1 while this replica holds the Lease and acts.", counters_.leader ? 1 : 0);
  w.single("numaserve_operator_leader_acquired_total", "counter", "Times this replica took the Lease.",
           counters_.lease_transitions);
  w.single("numaserve_operator_reconciles_total", "counter", "Passes over every pool of the namespace.", counters_.reconciles);
  w.single("numaserve_operator_errors_total", "counter", "API server requests that failed after their retries, and bad pools.",
           counters_.errors);
  w.family("numaserve_operator_objects_total", "counter",
           "The pools' objects, by what a pass did with each: applied, unchanged, deleted, or held (no plan wants "
           "it, but a Node of its class has no topology read).")
      .sample("numaserve_operator_objects_total", counters_.applied, "action=\"applied\"")
      .sample("numaserve_operator_objects_total", counters_.unchanged, "action=\"unchanged\"")
      .sample("numaserve_operator_objects_total", counters_.deleted, "action=\"deleted\"")
      .sample("numaserve_operator_objects_total", counters_.held, "action=\"held\"");
  auto& failures = w.family("numaserve_operator_apiserver_failures_total", "counter",
                            "API server requests that failed after their retries, by the HTTP status of the last "
                            "answer (0: none, or one cut short).");
  for (const auto& [code, n] : counters_.failed_replies) {
    failures.sample("numaserve_operator_apiserver_failures_total", n, "code=\"" + std::to_string(code) + "\"");
  }
  w.single("numaserve_operator_remembered_topologies", "gauge",
           "Nodes planned from the last NodeResourceTopology read of them: their Node exists, the object has gone.",
           remembered_.size());
  w.single("numaserve_operator_last_success_timestamp_seconds", "gauge",
           "Unix time of the last pass over every pool that met no error (0: none yet).", counters_.last_success);
  w.single("numaserve_operator_status_writes_total", "counter", "ServingPool status updates sent.", counters_.status_writes);
  w.family("numaserve_operator_refused_pods_total", "counter",
           "Pods the kubelet refused at admission, by what was done: deleted, or deferred by the node's backoff.")
      .sample("numaserve_operator_refused_pods_total", refusals_.deleted(), "action=\"deleted\"")
      .sample("numaserve_operator_refused_pods_total", refusals_.deferred(), "action=\"deferred\"");
  w.single("numaserve_operator_apiserver_retries_total", "counter", "API server requests retried after a transient failure.",
           api_.retries());
  return out;
}

}  // namespace numaserve::op::controller
