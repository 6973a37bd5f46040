#include "pool/pool.h"

#include <algorithm>
#include <set>

#include "numaserve/common/quantity.h"

namespace numaserve::agent::pool {
namespace {

using nlohmann::json;

tl::unexpected<Error> bad(const std::string& field, const std::string& message) {
  return make_error(Error::Code::kInvalidArgument, "ServingPool " + field + ": " + message, field);
}

// A share in (0, 1], or the default when absent.
Status read_fraction(const json& spec, const char* key, double& out) {
  if (!spec.contains(key)) return {};
  const json& v = spec[key];
  if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 1) {
    return bad(std::string("spec.") + key, "want a number in (0, 1]");
  }
  out = v.get<double>();
  return {};
}

Status read_count(const json& spec, const char* key, unsigned least, unsigned& out) {
  if (!spec.contains(key)) return {};
  const json& v = spec[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < least || v.get<std::int64_t>() > 1'000'000) {
    return bad(std::string("spec.") + key, "want a whole number of at least " + std::to_string(least));
  }
  out = v.get<unsigned>();
  return {};
}

bool empty_value(const json& v) { return v.is_null() || ((v.is_object() || v.is_array()) && v.empty()); }

json labels_of(const PoolSpec& pool, const std::string& class_name) {
  return {{"app.kubernetes.io/managed-by", kFieldManager}, {kPoolLabel, pool.name}, {kClassLabel, class_name}};
}

json owner_of(const PoolSpec& pool) {
  return json::array({{{"apiVersion", kApiVersion},
                       {"kind", "ServingPool"},
                       {"name", pool.name},
                       {"uid", pool.uid},
                       {"controller", true}}});
}

// The pool's pod template on one class's nodes, its container sized.
json class_template(const PoolSpec& pool, const fleet::ClassPlan& c) {
  json t = pool.pod_template;
  const json labels = labels_of(pool, c.name);
  for (const auto& [k, v] : labels.items()) t["metadata"]["labels"][k] = v;
  json& spec = t["spec"];
  // Required node affinity: every term also asks for a node of the class.
  const json class_term = {{"key", kClassLabel}, {"operator", "In"}, {"values", {c.name}}};
  json& required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  if (!required.contains("nodeSelectorTerms") || required["nodeSelectorTerms"].empty()) {
    required["nodeSelectorTerms"] = json::array({json::object()});
  }
  for (json& term : required["nodeSelectorTerms"]) term["matchExpressions"].push_back(class_term);
  // Spread over the class's machines unless the template says how: the
  // scheduler's node totals would otherwise stack replicas the kubelet's
  // NUMA zones cannot hold.
  if (!spec.contains("topologySpreadConstraints") || spec["topologySpreadConstraints"].empty()) {
    spec["topologySpreadConstraints"] = json::array({{{"maxSkew", 1},
                                                      {"topologyKey", "kubernetes.io/hostname"},
                                                      {"whenUnsatisfiable", "DoNotSchedule"},
                                                      {"nodeAffinityPolicy", "Honor"},
                                                      {"nodeTaintsPolicy", "Honor"},
                                                      {"labelSelector", {{"matchLabels", {{kPoolLabel, pool.name}, {kClassLabel, c.name}}}}}}});
  }
  for (json& container : spec["containers"]) {
    if (!pool.container.empty() ? container["name"] != pool.container : &container != &spec["containers"][0]) {
      continue;
    }
    // Guaranteed QoS, whole CPUs: requests = limits.
    for (const char* kind : {"requests", "limits"}) {
      container["resources"][kind]["cpu"] = std::to_string(c.cpus);
      container["resources"][kind]["memory"] = format_quantity(c.memory_bytes);
      for (const auto& [name, bytes] : c.hugepages) container["resources"][kind][name] = format_quantity(bytes);
    }
  }
  return t;
}

// Where the pod template's fields the operator writes into are, they must be
// of the kind it writes (the CRD leaves the pod spec open).
Status check_template(const json& t) {
  const auto want_object = [&](const json& v, const std::string& where) -> Status {
    if (!v.is_null() && !v.is_object()) return bad("spec.template." + where, "want an object");
    return {};
  };
  if (auto s = want_object(t.is_object() ? field(t, {"metadata"}) : t, "metadata"); !s) return s;
  if (auto s = want_object(field(t, {"metadata", "labels"}), "metadata.labels"); !s) return s;
  const json& spec = field(t, {"spec"});
  if (!spec.is_object()) return bad("spec.template.spec", "want the service's pod spec");
  const json& containers = field(spec, {"containers"});
  if (!containers.is_array() || containers.empty()) {
    return bad("spec.template.spec.containers", "want the service's pod template with at least one container");
  }
  for (std::size_t i = 0; i < containers.size(); ++i) {
    const std::string here = "spec.containers[" + std::to_string(i) + "]";
    if (!containers[i].is_object() || !containers[i].contains("name") || !containers[i]["name"].is_string()) {
      return bad("spec.template." + here + ".name", "want a container with a name");
    }
    if (auto s = want_object(field(containers[i], {"resources"}), here + ".resources"); !s) return s;
    for (const char* kind : {"requests", "limits"}) {
      if (auto s = want_object(field(containers[i], {"resources", kind}), here + ".resources." + kind); !s) return s;
    }
  }
  if (auto s = want_object(field(spec, {"affinity"}), "spec.affinity"); !s) return s;
  if (auto s = want_object(field(spec, {"affinity", "nodeAffinity"}), "spec.affinity.nodeAffinity"); !s) return s;
  const json& required = field(spec, {"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"});
  if (auto s = want_object(required, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"); !s) return s;
  const json& terms = field(required, {"nodeSelectorTerms"});
  if (!terms.is_null()) {
    if (!terms.is_array()) return bad("spec.template.spec.affinity...nodeSelectorTerms", "want a list");
    for (const json& term : terms) {
      if (!term.is_object() || (term.contains("matchExpressions") && !term["matchExpressions"].is_array())) {
        return bad("spec.template.spec.affinity...nodeSelectorTerms", "want terms with a list of matchExpressions");
      }
    }
  }
  const json& spread = field(spec, {"topologySpreadConstraints"});
  if (!spread.is_null() && !spread.is_array()) return bad("spec.template.spec.topologySpreadConstraints", "want a list");
  return {};
}

}  // namespace

const json& field(const json& j, std::initializer_list<std::string_view> path) {
  static const json null;
  const json* at = &j;
  for (const auto key : path) {
    if (!at->is_object()) return null;
    const auto it = at->find(key);
    if (it == at->end()) return null;
    at = &*it;
  }
  return *at;
}

std::string text_field(const json& j, std::initializer_list<std::string_view> path) {
  const json& v = field(j, path);
  return v.is_string() ? v.get<std::string>() : "";
}

std::int64_t integer_field(const json& j, std::initializer_list<std::string_view> path) {
  const json& v = field(j, path);
  return v.is_number_integer() ? v.get<std::int64_t>() : 0;
}

namespace {
// Its objects are named <pool>-<class>, and a Deployment's name must be a
// DNS label; the API server admits a ServingPool with dots in its name.
Status check_pool_name(const std::string& name) {
  if (name.size() > 49) return bad("metadata.name", "at most 49 characters (its Deployments add -mc-<10 hex>)");
  if (!std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }) ||
      name.front() == '-' || name.back() == '-') {
    return bad("metadata.name", "want a DNS label (lowercase letters, digits and '-'): its Deployments are named after it");
  }
  return {};
}
}  // namespace

Result<PoolSpec> parse_pool(const json& object) {
  PoolSpec pool;
  pool.name = text_field(object, {"metadata", "name"});
  pool.namespace_name = text_field(object, {"metadata", "namespace"});
  pool.uid = text_field(object, {"metadata", "uid"});
  pool.generation = integer_field(object, {"metadata", "generation"});
  if (pool.name.empty() || pool.namespace_name.empty()) return bad("metadata", "want a name and a namespace");
  if (auto named = check_pool_name(pool.name); !named) return tl::unexpected(named.error());
  const json& spec = field(object, {"spec"});
  if (!spec.is_object()) return bad("spec", "want an object");
  if (auto checked = check_template(field(spec, {"template"})); !checked) return tl::unexpected(checked.error());
  pool.pod_template = spec["template"];
  if (spec.contains("container") && !spec["container"].is_string()) return bad("spec.container", "want a container's name");
  pool.container = text_field(spec, {"container"});
  if (!pool.container.empty()) {
    const auto& containers = pool.pod_template["spec"]["containers"];
    if (std::none_of(containers.begin(), containers.end(),
                     [&](const json& c) { return c["name"] == pool.container; })) {
      return bad("spec.container", "no container of the template is named '" + pool.container + "'");
    }
  }
  if (spec.contains("sizing") && !spec["sizing"].is_string()) return bad("spec.sizing", "want per-class or uniform");
  auto sizing = fleet::parse_sizing(spec.contains("sizing") ? text_field(spec, {"sizing"}) : "per-class");
  if (!sizing) return bad("spec.sizing", "want per-class or uniform");
  pool.sizing.sizing = *sizing;
  if (auto s = read_count(spec, "replicasPerNumaNode", 1, pool.sizing.replicas_per_numa_node); !s) return tl::unexpected(s.error());
  if (auto s = read_count(spec, "headroom", 0, pool.headroom); !s) return tl::unexpected(s.error());
  if (auto s = read_fraction(spec, "podMemoryFraction", pool.sizing.pod_memory_fraction); !s) return tl::unexpected(s.error());
  if (auto s = read_fraction(spec, "uniformMinUse", pool.sizing.uniform_min_use); !s) return tl::unexpected(s.error());
  if (spec.contains("maxUnavailable")) {
    const json& m = spec["maxUnavailable"];
    if (!(m.is_number_integer() && m.get<std::int64_t>() >= 0) && !m.is_string()) {
      return bad("spec.maxUnavailable", "want a count or a percentage");
    }
    pool.max_unavailable = m;
  }
  if (spec.contains("hugepagesPerReplica")) {
    if (!spec["hugepagesPerReplica"].is_object()) return bad("spec.hugepagesPerReplica", "want a map of hugepages-<size> to a quantity");
    for (const auto& [k, v] : spec["hugepagesPerReplica"].items()) {
      auto bytes = v.is_string() ? parse_quantity(v.get<std::string>()) : Result<std::uint64_t>(0);
      if (!k.starts_with("hugepages-") || !bytes || *bytes == 0) {
        return bad("spec.hugepagesPerReplica." + k, "want hugepages-<size>: <quantity>");
      }
      pool.sizing.hugepages_per_replica[k] = *bytes;
    }
  }
  if (spec.contains("nodeSelector")) {
    if (!spec["nodeSelector"].is_object()) return bad("spec.nodeSelector", "want a map of labels");
    for (const auto& [k, v] : spec["nodeSelector"].items()) {
      if (!v.is_string()) return bad("spec.nodeSelector." + k, "want a string");
      pool.node_selector[k] = v.get<std::string>();
    }
  }
  return pool;
}

Result<std::vector<fleet::FleetNode>> fleet_of(const json& node_list, const json& nrt_list,
                                               const std::map<std::string, std::string>& node_selector) {
  // The reader takes objects as kubectl prints them: a List whose items say their kind.
  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
  // With a selector, a NodeResourceTopology counts only beside a Node that
  // matched it (not one outside it, nor one with no Node at all).
  std::set<std::string> selected;
  for (const auto& [reply, kind] : {std::pair{&node_list, "Node"}, std::pair{&nrt_list, "NodeResourceTopology"}}) {
    const json& items = field(*reply, {"items"});
    if (!items.is_null() && !items.is_array()) return make_error(Error::Code::kInvalidArgument, std::string(kind) + " list: items: want a list");
    for (json item : items.is_array() ? items : json::array()) {
      if (!field(item, {"metadata"}).is_object()) {
        return make_error(Error::Code::kInvalidArgument, std::string(kind) + " list: an item without metadata");
      }
      item["kind"] = kind;
      const std::string name = text_field(item, {"metadata", "name"});
      const json& labels = field(item, {"metadata", "labels"});
      if (kind == std::string("Node")) {
        if (std::any_of(node_selector.begin(), node_selector.end(),
                        [&](const auto& kv) { return text_field(labels, {kv.first}) != kv.second; })) {
          continue;
        }
        selected.insert(name);
      } else if (!node_selector.empty() && !selected.contains(name)) {
        continue;
      }
      list["items"].push_back(std::move(item));
    }
  }
  return fleet::read_objects(list.dump(), "the API server's Node and NodeResourceTopology lists");
}

std::vector<json> desired_objects(const PoolSpec& pool, const fleet::FleetPlan& plan) {
  std::vector<json> out;
  for (const auto& c : plan.classes) {
    const std::string name = pool.name + "-" + c.name;
    const json labels = labels_of(pool, c.name);
    const json selector = {{"matchLabels", {{kPoolLabel, pool.name}, {kClassLabel, c.name}}}};
    const std::uint64_t slots = std::uint64_t{c.replicas_per_node} * c.nodes.size();
    const json metadata = {{"name", name}, {"namespace", pool.namespace_name}, {"labels", labels},
                           {"ownerReferences", owner_of(pool)}};
    out.push_back({{"apiVersion", "apps/v1"},
                   {"kind", "Deployment"},
                   {"metadata", metadata},
                   {"spec",
                    {{"replicas", slots > pool.headroom ? slots - pool.headroom : 0},
                     {"selector", selector},
                     // No surge: every NUMA slot of the class is taken, a surge
                     // pod would stay Pending and the rollout never finish.
                     {"strategy", {{"type", "RollingUpdate"},
                                   {"rollingUpdate", {{"maxSurge", 0}, {"maxUnavailable", pool.max_unavailable}}}}},
                     {"template", class_template(pool, c)}}}});
    out.push_back({{"apiVersion", "policy/v1"},
                   {"kind", "PodDisruptionBudget"},
                   {"metadata", metadata},
                   {"spec", {{"maxUnavailable", pool.max_unavailable}, {"selector", selector}}}});
  }
  return out;
}

std::string first_difference(const json& live, const json& desired) {
  if (empty_value(desired)) return live.is_null() || empty_value(live) || live == desired ? "" : "/";
  if (desired.is_object()) {
    if (!live.is_object()) return "/";
    for (const auto& [k, v] : desired.items()) {
      const std::string here = "/" + k;
      if (!live.contains(k)) {
        if (!empty_value(v)) return here;
        continue;
      }
      if (std::string deeper = first_difference(live[k], v); !deeper.empty()) return here + (deeper == "/" ? "" : deeper);
    }
    return "";
  }
  if (desired.is_array()) {
    if (!live.is_array() || live.size() != desired.size()) return "/";
    for (std::size_t i = 0; i < desired.size(); ++i) {
      const std::string here = "/" + std::to_string(i);
      if (std::string deeper = first_difference(live[i], desired[i]); !deeper.empty()) return here + (deeper == "/" ? "" : deeper);
    }
    return "";
  }
  // The API server writes integers back as integers; a number we send as a
  // float (0.9) stays one. Compare numbers by value.
  if (desired.is_number() && live.is_number()) return desired.get<double>() == live.get<double>() ? "" : "/";
  return live == desired ? "" : "/";
}

bool contains(const json& live, const json& desired) { return first_difference(live, desired).empty(); }

bool refused_at_admission(const json& pod) {
  if (text_field(pod, {"status", "phase"}) != "Failed") return false;
  const std::string reason = text_field(pod, {"status", "reason"});
  return reason == "TopologyAffinityError" || reason == "SMTAlignmentError" || reason == "UnexpectedAdmissionError" ||
         reason.rfind("OutOf", 0) == 0;
}

bool Refusals::admit_delete(const std::string& node, const std::string& reason, Clock::time_point now) {
  Node& n = nodes_[node];
  if (n.refusals > 0 && now - n.last > forget_) n = Node{};
  if (n.refusals > 0 && now < n.next_delete) {
    ++deferred_;
    return false;
  }
  ++n.refusals;
  ++deleted_;
  n.last_reason = reason;
  n.last = now;
  Clock::duration wait = first_;
  for (unsigned i = 1; i < n.refusals && wait < most_; ++i) wait *= 2;
  n.next_delete = now + std::min(wait, most_);
  return true;
}

std::map<std::string, Refusals::Node> Refusals::repeated(unsigned at_least, Clock::time_point now) const {
  std::map<std::string, Node> out;
  for (const auto& [name, n] : nodes_) {
    if (n.refusals >= at_least && now - n.last <= forget_) out[name] = n;
  }
  return out;
}

json pool_status(const PoolSpec& pool, const fleet::FleetPlan* plan, const std::map<std::string, ClassState>& classes,
                 const Refusals& refusals, const std::string& error, const json& previous, const std::string& now,
                 Refusals::Clock::time_point steady_now) {
  json status = {{"observedGeneration", pool.generation}, {"classes", json::array()}, {"unplanned", json::array()}};
  bool ready = plan != nullptr && error.empty();
  std::string message = error;
  if (plan != nullptr) {
    status["sizing"] = std::string(fleet::to_string(plan->sizing));
    std::int64_t desired_total = 0, ready_total = 0;
    for (const auto& c : plan->classes) {
      const std::uint64_t slots = std::uint64_t{c.replicas_per_node} * c.nodes.size();
      const std::int64_t desired = static_cast<std::int64_t>(slots > pool.headroom ? slots - pool.headroom : 0);
      const auto it = classes.find(c.name);
      const std::int64_t got = it == classes.end() ? 0 : it->second.ready_replicas;
      desired_total += desired;
      ready_total += got;
      if (got < desired) ready = false;
      status["classes"].push_back({{"name", c.name},
                                   {"nodes", c.nodes},
                                   {"replicasPerNode", c.replicas_per_node},
                                   {"replicas", desired},
                                   {"readyReplicas", got},
                                   {"replica", {{"cpus", c.cpus}, {"memory", format_quantity(c.memory_bytes)}}}});
    }
    for (const auto& u : plan->unplanned) status["unplanned"].push_back({{"node", u.node}, {"reason", u.reason}});
    status["cpusUsed"] = plan->cpus_used();
    status["cpusAllocatable"] = plan->cpus_allocatable();
    if (message.empty()) {
      message = std::to_string(ready_total) + " of " + std::to_string(desired_total) + " replicas ready in " +
                std::to_string(plan->classes.size()) + " machine class(es)";
    }
  }
  status["refusedPods"] = refusals.deleted();
  status["refusingNodes"] = json::array();
  for (const auto& [node, n] : refusals.repeated(3, steady_now)) {
    status["refusingNodes"].push_back({{"node", node}, {"refusals", n.refusals}, {"lastReason", n.last_reason}});
  }
  status["lastError"] = error;
  json condition = {{"type", "Ready"},
                    {"status", ready ? "True" : "False"},
                    {"reason", !error.empty() ? "ReconcileFailed" : ready ? "AllReplicasReady" : "ReplicasNotReady"},
                    {"message", message},
                    {"observedGeneration", pool.generation},
                    {"lastTransitionTime", now}};
  const json& conditions = field(previous, {"conditions"});
  for (const json& old : conditions.is_array() ? conditions : json::array()) {
    if (text_field(old, {"type"}) == "Ready" && text_field(old, {"status"}) == condition["status"] &&
        field(old, {"lastTransitionTime"}).is_string()) {
      condition["lastTransitionTime"] = old["lastTransitionTime"];
    }
  }
  status["conditions"] = json::array({condition});
  return status;
}

std::optional<json> LeaderElection::next(const json& lease, Clock::time_point now, const std::string& wall_now) {
  const json spec_for_me = {{"holderIdentity", identity_},
                            {"leaseDurationSeconds", duration_seconds_},
                            {"renewTime", wall_now}};
  if (!lease.is_null() && !lease.is_object()) return std::nullopt;  // not a Lease: wait for one
  if (lease.is_null()) {
    observed_record_.clear();
    json l = {{"apiVersion", "coordination.k8s.io/v1"},
              {"kind", "Lease"},
              {"metadata", {{"name", name_}, {"namespace", namespace_}}},
              {"spec", spec_for_me}};
    l["spec"]["acquireTime"] = wall_now;
    l["spec"]["leaseTransitions"] = 0;
    return l;
  }
  const json spec = field(lease, {"spec"}).is_object() ? lease["spec"] : json::object();
  const std::string holder = text_field(spec, {"holderIdentity"});
  json l = lease;
  if (holder == identity_) {  // renew
    l["spec"]["renewTime"] = wall_now;
    l["spec"]["leaseDurationSeconds"] = duration_seconds_;
    return l;
  }
  const std::string record = spec.dump();
  if (record != observed_record_) {  // the holder renewed (or changed) since we last looked
    observed_record_ = record;
    observed_at_ = now;
  }
  const std::int64_t given = integer_field(spec, {"leaseDurationSeconds"});
  const unsigned duration = given > 0 && given < 3600 ? static_cast<unsigned>(given) : duration_seconds_;
  if (!holder.empty() && now - observed_at_ < std::chrono::seconds(duration)) return std::nullopt;
  l["spec"] = spec_for_me;
  l["spec"]["acquireTime"] = wall_now;
  l["spec"]["leaseTransitions"] = integer_field(spec, {"leaseTransitions"}) + 1;
  return l;
}

}  // namespace numaserve::agent::pool
