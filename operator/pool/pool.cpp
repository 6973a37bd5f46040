#include "pool/pool.h"

#include <algorithm>
#include <set>

#include "numaserve/common/quantity.h"
#include "pool/fields.h"

namespace numaserve::op::pool {
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
// spec.hugepagesPerReplica and spec.nodeSelector.
Status read_placement(const json& spec, PoolSpec& pool) {
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
  return {};
}

// A list of objects at `where`, each with the integer or string members
// `required` names; absent: empty.
Status read_objects(const json& spec, std::initializer_list<std::string_view> path, const std::string& where,
                    const char* required, bool integer, json& out) {
  const json& list = field(spec, path);
  if (list.is_null()) return {};
  if (!list.is_array()) return bad(where, "want a list");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& member = field(list[i], {required});
    const bool fits = integer ? member.is_number_integer() && member.get<std::int64_t>() >= 1 &&
                                    member.get<std::int64_t>() <= 65535
                              : member.is_string() && !member.get<std::string>().empty();
    if (!list[i].is_object() || !fits) {
      return bad(where + "[" + std::to_string(i) + "]." + required, integer ? "want a port number" : "want a name");
    }
  }
  out = list;
  return {};
}

// spec.service.ports and spec.httpRoute: a Service per class, and the route
// that weights them.
Status read_traffic(const json& spec, PoolSpec& pool) {
  if (auto s = read_objects(spec, {"service", "ports"}, "spec.service.ports", "port", true, pool.service_ports); !s) return s;
  if (auto s = read_objects(spec, {"httpRoute", "parentRefs"}, "spec.httpRoute.parentRefs", "name", false, pool.route_parents);
      !s) {
    return s;
  }
  const json& hostnames = field(spec, {"httpRoute", "hostnames"});
  if (!hostnames.is_null()) {
    if (!hostnames.is_array() ||
        std::any_of(hostnames.begin(), hostnames.end(), [](const json& h) { return !h.is_string(); })) {
      return bad("spec.httpRoute.hostnames", "want a list of host names");
    }
    pool.route_hostnames = hostnames;
  }
  if (!pool.route_parents.empty() && pool.service_ports.empty()) {
    return bad("spec.httpRoute", "needs spec.service.ports: its backends are the classes' Services");
  }
  return {};
}


// spec.autoscaling, as the CRD's schema has it (which refused the rest).
Status read_autoscaling(const json& spec, PoolSpec& pool) {
  const json& a = field(spec, {"autoscaling"});
  if (a.is_null()) return {};
  if (!a.is_object()) return bad("spec.autoscaling", "want an object");
  auto& out = pool.autoscaling;
  out.enabled = !a.contains("enabled") || a["enabled"] == true;
  if (a.contains("minReplicas")) {
    if (!a["minReplicas"].is_number_integer() || a["minReplicas"].get<std::int64_t>() < 1) {
      return bad("spec.autoscaling.minReplicas", "want a count of 1 or more");
    }
    out.min_replicas = a["minReplicas"].get<std::int64_t>();
  }
  const std::string metric = a.contains("metric") ? text_field(a, {"metric"}) : "cpu";
  if (metric != "cpu" && metric != "saturation") return bad("spec.autoscaling.metric", "want cpu or saturation");
  out.saturation = metric == "saturation";
  if (a.contains("targetCPUUtilizationPercentage")) {
    const json& t = a["targetCPUUtilizationPercentage"];
    if (!t.is_number_integer() || t.get<std::int64_t>() < 1 || t.get<std::int64_t>() > 100) {
      return bad("spec.autoscaling.targetCPUUtilizationPercentage", "want a percentage from 1 to 100");
    }
    out.target_cpu_percent = t.get<std::int64_t>();
  }
  if (a.contains("targetSaturation")) {
    if (!a["targetSaturation"].is_string()) return bad("spec.autoscaling.targetSaturation", "want a quantity, e.g. 700m");
    out.target_saturation = a["targetSaturation"].get<std::string>();
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
  auto sizing = kube::fleet::parse_sizing(spec.contains("sizing") ? text_field(spec, {"sizing"}) : "per-class");
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
  if (auto s = read_placement(spec, pool); !s) return tl::unexpected(s.error());
  if (auto s = read_traffic(spec, pool); !s) return tl::unexpected(s.error());
  if (auto s = read_autoscaling(spec, pool); !s) return tl::unexpected(s.error());
  return pool;
}


bool selected(const json& node, const std::map<std::string, std::string>& node_selector) {
  const json& labels = field(node, {"metadata", "labels"});
  return std::all_of(node_selector.begin(), node_selector.end(),
                     [&](const auto& kv) { return text_field(labels, {kv.first}) == kv.second; });
}

std::set<std::string> held_classes(const json& node_list, const std::map<std::string, std::string>& node_selector,
                                   const kube::fleet::FleetPlan& plan) {
  std::set<std::string> held;
  const json& items = field(node_list, {"items"});
  for (const json& node : items.is_array() ? items : json::array()) {
    const std::string class_name = text_field(node, {"metadata", "labels", kClassLabel});
    if (!class_name.empty() && selected(node, node_selector) &&
        std::none_of(plan.classes.begin(), plan.classes.end(), [&](const auto& c) { return c.name == class_name; })) {
      held.insert(class_name);
    }
  }
  return held;
}

Result<std::vector<kube::fleet::FleetNode>> fleet_of(const json& node_list, const json& nrt_list,
                                               const std::map<std::string, std::string>& node_selector) {
  // The reader takes objects as kubectl prints them: a List whose items say their kind.
  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
  // With a selector, a NodeResourceTopology counts only beside a Node that
  // matched it (not one outside it, nor one with no Node at all).
  std::set<std::string> chosen;
  for (const auto& [reply, kind] : {std::pair{&node_list, "Node"}, std::pair{&nrt_list, "NodeResourceTopology"}}) {
    const json& items = field(*reply, {"items"});
    if (!items.is_null() && !items.is_array()) return make_error(Error::Code::kInvalidArgument, std::string(kind) + " list: items: want a list");
    for (json item : items.is_array() ? items : json::array()) {
      if (!field(item, {"metadata"}).is_object()) {
        return make_error(Error::Code::kInvalidArgument, std::string(kind) + " list: an item without metadata");
      }
      item["kind"] = kind;
      const std::string name = text_field(item, {"metadata", "name"});
      if (kind == std::string("Node")) {
        if (!pool::selected(item, node_selector)) continue;
        chosen.insert(name);
      } else if (!node_selector.empty() && !chosen.contains(name)) {
        continue;
      }
      list["items"].push_back(std::move(item));
    }
  }
  return kube::fleet::read_objects(list.dump(), "the API server's Node and NodeResourceTopology lists");
}

}  // namespace numaserve::op::pool
