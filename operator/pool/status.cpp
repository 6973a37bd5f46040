#include "pool/status.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "numaserve/common/quantity.h"
#include "pool/fields.h"
#include "pool/objects.h"

namespace numaserve::op::pool {
namespace {

using nlohmann::json;

// A node that refused this many pods since it last went quiet is reported.
constexpr unsigned kRefusingAfter = 3;

struct Condition {
  const char* type;
  bool status;
  std::string reason, message;
};

// The replicas of every class, against what the plan wants.
struct Totals {
  std::int64_t desired = 0, ready = 0;
  bool all_ready = true, available = true;
  std::string short_class;  // the first class below its minimum
};

json classes_json(const PoolSpec& pool, const kube::fleet::FleetPlan& plan, const PassReport& pass, Totals& totals) {
  json out = json::array();
  for (const auto& c : plan.classes) {
    const std::int64_t desired = desired_replicas(pool, c);
    const auto it = pass.ready.find(c.name);
    const std::int64_t ready = it == pass.ready.end() ? 0 : it->second;
    totals.desired += desired;
    totals.ready += ready;
    if (ready < desired) totals.all_ready = false;
    if (ready < desired - max_unavailable_of(pool.max_unavailable, desired) && totals.available) {
      totals.available = false;
      totals.short_class = c.name;
    }
    out.push_back({{"name", c.name},
                   {"nodes", c.nodes},
                   {"replicasPerMachine", c.replicas_per_machine},
                   {"replicas", desired},
                   {"readyReplicas", ready},
                   {"replica", {{"cpus", c.cpus}, {"memory", format_quantity(c.memory_bytes)}}}});
  }
  return out;
}

// How far one Service's equal split reaches, and what the pool does about it.
json traffic_json(const PoolSpec& pool, const kube::fleet::FleetPlan& plan) {
  const double share = plan.equal_split_share();
  char line[200];
  std::snprintf(line, sizeof line, "one Service through kube-proxy puts %.0f%% of the planned CPUs to work", 100 * share);
  std::string message = line;
  if (share < 1) {
    message += " (the " + std::to_string(plan.smallest_replica_cpus()) + "-CPU replicas saturate first); ";
    message += pool.route_parents.empty() ? "spec.httpRoute weights each class's Service by its CPUs, or size uniform"
                                          : "the HTTPRoute weights each class's Service by its ready CPUs";
  }
  return {{"equalSplitShare", share}, {"weightedRoute", !pool.route_parents.empty()}, {"message", message}};
}

std::vector<Condition> conditions_of(const kube::fleet::FleetPlan* plan, const PassReport& pass, const Totals& t,
                                     const json& refusing) {
  std::vector<Condition> out;
  const std::string replicas = std::to_string(t.ready) + " of " + std::to_string(t.desired) + " replicas ready in " +
                               std::to_string(plan ? plan->classes.size() : 0) + " machine class(es)";
  if (plan == nullptr) {
    out.push_back({"Available", false, "NoPlan", pass.error});
    out.push_back({"Progressing", false, "NoPlan", pass.error});
  } else {
    out.push_back({"Available", t.available, t.available ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable",
                   t.available ? replicas : replicas + "; class " + t.short_class + " is below its minimum"});
    const bool progressing = pass.applied > 0 || !t.all_ready;
    out.push_back({"Progressing", progressing,
                   pass.applied > 0 ? "ObjectsApplied" : !t.all_ready ? "ReplicasNotReady" : "AllReplicasReady",
                   pass.applied > 0 ? std::to_string(pass.applied) + " object(s) applied; " + replicas : replicas});
  }
  if (!pass.error.empty()) {
    out.push_back({"Degraded", true, pass.fault.empty() ? "ApiServerError" : pass.fault, pass.error});
  } else if (!pass.remembered_topologies.empty() || !pass.held_classes.empty()) {
    std::string message;
    for (const auto& node : pass.remembered_topologies) message += (message.empty() ? "" : ", ") + node;
    if (!message.empty()) message = "planned from the last NodeResourceTopology read, none now: node(s) " + message;
    for (const auto& c : pass.held_classes) {
      message += (message.empty() ? "" : "; ") + std::string("class ") + c +
                 ": a node still has its label but no NodeResourceTopology; its objects are kept as they are";
    }
    out.push_back({"Degraded", true, "TopologyMissing", message});
  } else if (!refusing.empty()) {
    out.push_back({"Degraded", true, "NodesRefusingPods",
                   std::to_string(refusing.size()) + " node(s) refused " + std::to_string(kRefusingAfter) +
                       " or more pods at admission, e.g. " + refusing[0]["node"].get<std::string>() + ": " +
                       refusing[0]["lastReason"].get<std::string>()});
  } else {
    out.push_back({"Degraded", false, "AsExpected", "the last pass succeeded"});
  }
  return out;
}

json conditions_json(const std::vector<Condition>& conditions, std::int64_t generation, const json& previous,
                     const std::string& now) {
  json out = json::array();
  const json& before = field(previous, {"conditions"});
  for (const Condition& c : conditions) {
    json condition = {{"type", c.type},
                      {"status", c.status ? "True" : "False"},
                      {"reason", c.reason},
                      {"message", c.message},
                      {"observedGeneration", generation},
                      {"lastTransitionTime", now}};
    for (const json& old : before.is_array() ? before : json::array()) {
      if (text_field(old, {"type"}) == c.type && text_field(old, {"status"}) == condition["status"] &&
          field(old, {"lastTransitionTime"}).is_string()) {
        condition["lastTransitionTime"] = old["lastTransitionTime"];
      }
    }
    out.push_back(std::move(condition));
  }
  return out;
}

}  // namespace

std::int64_t max_unavailable_of(const json& max_unavailable, std::int64_t replicas) {
  if (max_unavailable.is_number_integer()) return max_unavailable.get<std::int64_t>();
  if (!max_unavailable.is_string()) return 0;
  const std::string text = max_unavailable.get<std::string>();
  if (text.empty() || text.back() != '%') return 0;
  const long percent = std::strtol(text.c_str(), nullptr, 10);
  return percent <= 0 ? 0 : replicas * percent / 100;
}

json pool_status(const PoolSpec& pool, const kube::fleet::FleetPlan* plan, const PassReport& pass, const Refusals& refusals,
                 const json& previous, const std::string& now, Refusals::Clock::time_point steady_now) {
  if (pass.read_failed && previous.is_object() && previous.contains("conditions")) {
    json status = previous;
    status["lastError"] = pass.error;
    json conditions = json::array();
    for (const json& c : field(previous, {"conditions"})) {
      if (text_field(c, {"type"}) != "Degraded") conditions.push_back(c);
    }
    const json degraded = conditions_json({{"Degraded", true, pass.fault, pass.error}}, pool.generation, previous, now);
    conditions.push_back(degraded[0]);
    status["conditions"] = conditions;
    return status;
  }
  json status = {{"observedGeneration", pool.generation}, {"classes", json::array()}, {"unplanned", json::array()}};
  Totals totals;
  if (plan != nullptr) {
    status["sizing"] = std::string(kube::fleet::to_string(plan->sizing));
    status["classes"] = classes_json(pool, *plan, pass, totals);
    for (const auto& u : plan->unplanned) status["unplanned"].push_back({{"node", u.node}, {"reason", u.reason}});
    status["cpusUsed"] = plan->cpus_used();
    status["cpusAllocatable"] = plan->cpus_allocatable();
    status["traffic"] = traffic_json(pool, *plan);
  }
  status["refusedPods"] = refusals.deleted();
  status["refusingNodes"] = json::array();
  for (const auto& [node, n] : refusals.repeated(kRefusingAfter, steady_now)) {
    status["refusingNodes"].push_back({{"node", node}, {"refusals", n.refusals}, {"lastReason", n.last_reason}});
  }
  status["lastError"] = pass.error;
  status["conditions"] =
      conditions_json(conditions_of(plan, pass, totals, status["refusingNodes"]), pool.generation, previous, now);
  return status;
}

}  // namespace numaserve::op::pool
