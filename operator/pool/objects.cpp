#include "pool/objects.h"

#include <algorithm>

#include "numaserve/common/quantity.h"
#include "pool/fields.h"

namespace numaserve::op::pool {
namespace {

using nlohmann::json;

// What a class's Deployment, PDB, Service and spread select: its pods.
json class_pods(const PoolSpec& pool, const std::string& class_name) {
  return {{kPoolLabel, pool.name}, {kClassLabel, class_name}};
}

// A class's objects and pods: what selects them, and who manages them.
json labels_of(const PoolSpec& pool, const std::string& class_name) {
  json labels = class_pods(pool, class_name);
  labels["app.kubernetes.io/managed-by"] = kFieldManager;
  return labels;
}

// A class's Deployment, PDB and Service, and its backend in the route.
std::string class_object_name(const PoolSpec& pool, const kube::fleet::ClassPlan& c) { return pool.name + "-" + c.name; }

json owner_of(const PoolSpec& pool) {
  return json::array({{{"apiVersion", kApiVersion},
                       {"kind", "ServingPool"},
                       {"name", pool.name},
                       {"uid", pool.uid},
                       {"controller", true}}});
}

// Spread over the class's machines unless the template says how: the
// scheduler's node totals would otherwise stack replicas the kubelet's NUMA
// zones cannot hold. A constraint of the template that spreads the
// template's own pods (`own`: the template's labels) counts them per class,
// as the chart's per-class Deployments do.
void spread_per_class(json& spec, const json& own, const PoolSpec& pool, const std::string& class_name) {
  json& constraints = spec["topologySpreadConstraints"];
  if (constraints.is_null() || constraints.empty()) {
    constraints = json::array({{{"maxSkew", 1},
                                {"topologyKey", "kubernetes.io/hostname"},
                                {"whenUnsatisfiable", "DoNotSchedule"},
                                {"nodeAffinityPolicy", "Honor"},
                                {"nodeTaintsPolicy", "Honor"},
                                {"labelSelector", {{"matchLabels", class_pods(pool, class_name)}}}}});
    return;
  }
  for (json& constraint : constraints) {
    if (!constraint.is_object() || !field(constraint, {"labelSelector", "matchLabels"}).is_object()) continue;
    json& match = constraint["labelSelector"]["matchLabels"];
    const auto items = match.items();
    const bool spreads_own = !match.empty() && own.is_object() && std::all_of(items.begin(), items.end(), [&](const auto& kv) {
      return own.contains(kv.key()) && own[kv.key()] == kv.value();
    });
    if (spreads_own) match[kClassLabel] = class_name;
  }
}

// The pool's pod template on one class's nodes, its container sized.
json class_template(const PoolSpec& pool, const kube::fleet::ClassPlan& c) {
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
  spread_per_class(spec, field(pool.pod_template, {"metadata", "labels"}), pool, c.name);
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

// The pool's HTTPRoute: one rule, one backendRef per class's Service,
// weighted by the CPUs its ready replicas serve with (a class with none
// ready gets none of the traffic).
json route(const PoolSpec& pool, const kube::fleet::FleetPlan& plan, const std::map<std::string, std::int64_t>& ready) {
  json backends = json::array();
  for (const auto& c : plan.classes) {
    const auto it = ready.find(c.name);
    const std::int64_t weight = std::int64_t{c.cpus} * (it == ready.end() ? 0 : it->second);
    backends.push_back({{"name", class_object_name(pool, c)}, {"port", pool.service_ports[0]["port"]}, {"weight", weight}});
  }
  json spec = {{"parentRefs", pool.route_parents}, {"rules", json::array({{{"backendRefs", backends}}})}};
  if (!pool.route_hostnames.empty()) spec["hostnames"] = pool.route_hostnames;
  return {{"apiVersion", "gateway.networking.k8s.io/v1"},
          {"kind", "HTTPRoute"},
          {"metadata",
           {{"name", pool.name},
            {"namespace", pool.namespace_name},
            {"labels", {{"app.kubernetes.io/managed-by", kFieldManager}, {kPoolLabel, pool.name}}},
            {"ownerReferences", owner_of(pool)}}},
          {"spec", spec}};
}

// A class's HorizontalPodAutoscaler: from minReplicas (at most `most`) to
// `most`, the class's NUMA slots less the headroom — more would stay Pending.
json autoscaler(const PoolSpec& pool, const json& metadata, std::int64_t most) {
  const auto& a = pool.autoscaling;
  const json metric = a.saturation ? json{{"type", "Pods"},
                                          {"pods",
                                           {{"metric", {{"name", "numaserve_saturation"}}},
                                            {"target", {{"type", "AverageValue"}, {"averageValue", a.target_saturation}}}}}}
                                   : json{{"type", "Resource"},
                                          {"resource",
                                           {{"name", "cpu"},
                                            {"target", {{"type", "Utilization"}, {"averageUtilization", a.target_cpu_percent}}}}}};
  return {{"apiVersion", "autoscaling/v2"},
          {"kind", "HorizontalPodAutoscaler"},
          {"metadata", metadata},
          {"spec",
           {{"scaleTargetRef", {{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"name", metadata["name"]}}},
            {"minReplicas", std::min(a.min_replicas, most)},
            {"maxReplicas", most},
            {"metrics", json::array({metric})}}}};
}

}  // namespace

std::int64_t desired_replicas(const PoolSpec& pool, const kube::fleet::ClassPlan& c) {
  const std::uint64_t slots = c.replicas();
  return static_cast<std::int64_t>(slots > pool.headroom ? slots - pool.headroom : 0);
}

std::vector<json> desired_objects(const PoolSpec& pool, const kube::fleet::FleetPlan& plan,
                                  const std::map<std::string, std::int64_t>& ready) {
  std::vector<json> out;
  for (const auto& c : plan.classes) {
    const json labels = labels_of(pool, c.name);
    const json selector = {{"matchLabels", class_pods(pool, c.name)}};
    const json metadata = {{"name", class_object_name(pool, c)}, {"namespace", pool.namespace_name}, {"labels", labels},
                           {"ownerReferences", owner_of(pool)}};
    const std::int64_t replicas = desired_replicas(pool, c);
    const bool scaled = pool.autoscaling.enabled && replicas > 0;
    json deployment = {{"apiVersion", "apps/v1"},
                       {"kind", "Deployment"},
                       {"metadata", metadata},
                       {"spec",
                        {{"selector", selector},
                         // No surge: every NUMA slot of the class is taken, a surge
                         // pod would stay Pending and the rollout never finish.
                         {"strategy", {{"type", "RollingUpdate"},
                                       {"rollingUpdate", {{"maxSurge", 0}, {"maxUnavailable", pool.max_unavailable}}}}},
                         {"template", class_template(pool, c)}}}};
    // With an HPA the replicas are its: the operator's apply leaves them out.
    if (!scaled) deployment["spec"]["replicas"] = replicas;
    out.push_back(std::move(deployment));
    if (scaled) out.push_back(autoscaler(pool, metadata, replicas));
    out.push_back({{"apiVersion", "policy/v1"},
                   {"kind", "PodDisruptionBudget"},
                   {"metadata", metadata},
                   {"spec", {{"maxUnavailable", pool.max_unavailable}, {"selector", selector}}}});
    if (!pool.service_ports.empty()) {
      out.push_back({{"apiVersion", "v1"},
                     {"kind", "Service"},
                     {"metadata", metadata},
                     {"spec", {{"type", "ClusterIP"}, {"selector", class_pods(pool, c.name)}, {"ports", pool.service_ports}}}});
    }
  }
  if (!pool.route_parents.empty()) out.push_back(route(pool, plan, ready));
  return out;
}

Status route_fits(const PoolSpec& pool, const kube::fleet::FleetPlan& plan) {
  if (pool.route_parents.empty() || plan.classes.size() <= kMostBackends) return {};
  return make_error(Error::Code::kInvalidArgument,
                    "ServingPool spec.httpRoute: " + std::to_string(plan.classes.size()) +
                        " machine classes, but an HTTPRoute rule takes at most " + std::to_string(kMostBackends) +
                        " backendRefs; size uniform, or split the fleet into pools by nodeSelector",
                    "spec.httpRoute");
}

PassObjects pass_objects(const PoolSpec& pool, const kube::fleet::FleetPlan& plan, const std::map<std::string, std::int64_t>& ready,
                         const std::set<std::string>& held) {
  PassObjects out;
  PoolSpec serving = pool;
  if (auto fits = route_fits(pool, plan); !fits) {
    out.route_refused = fits.error();
    serving.route_parents = nlohmann::json::array();
  }
  out.desired = desired_objects(serving, plan, ready);
  const bool route_held = !serving.route_parents.empty() && !held.empty();
  if (route_held) std::erase_if(out.desired, [](const nlohmann::json& d) { return d["kind"] == "HTTPRoute"; });
  out.keep_route = out.route_refused.has_value() || route_held;
  return out;
}

}  // namespace numaserve::op::pool
