// The operator's decisions (operator/pool/), each pure.
#include "pool/pool.h"

#include "pool/compare.h"
#include "pool/election.h"
#include "pool/objects.h"
#include "pool/refusals.h"
#include "pool/status.h"

#include <gtest/gtest.h>

#include <set>

namespace numaserve::op::pool {
namespace {

using nlohmann::json;
using std::chrono::seconds;
constexpr std::uint64_t kGi = 1ull << 30;

json pool_object(json spec = json::object()) {
  json object = {{"apiVersion", kApiVersion},
                 {"kind", "ServingPool"},
                 {"metadata", {{"name", "ranking"}, {"namespace", "serving"}, {"uid", "u-1"}, {"generation", 3}}},
                 {"spec", {{"template", {{"metadata", {{"labels", {{"app", "ranker"}}}}},
                                         {"spec", {{"containers", {{{"name", "sidecar"}, {"image", "s"}},
                                                                   {{"name", "numaserve"}, {"image", "n"}}}}}}}}}}};
  for (const auto& [k, v] : spec.items()) object["spec"][k] = v;
  return object;
}

PoolSpec parsed(json spec = json::object()) {
  auto pool = parse_pool(pool_object(std::move(spec)));
  if (!pool) {
    ADD_FAILURE() << pool.error().message;
    return {};
  }
  return std::move(*pool);
}

// The API server's lists: Nodes with the agent's labels, their NRTs.
json node_list(const std::vector<std::pair<std::string, std::map<std::string, std::string>>>& nodes) {
  json items = json::array();
  for (const auto& [name, extra] : nodes) {
    json labels = {{"numaserve.io/numa-nodes", "2"}, {"numaserve.io/threads-per-core", "2"}};
    for (const auto& [k, v] : extra) labels[k] = v;
    items.push_back({{"metadata", {{"name", name}, {"labels", labels}}}});
  }
  return {{"kind", "NodeList"}, {"items", items}};
}

json nrt_item(const std::string& name, unsigned cpus, std::uint64_t memory) {
  json zones = json::array();
  for (int i = 0; i < 2; ++i) {
    zones.push_back({{"name", "node-" + std::to_string(i)},
                     {"type", "Node"},
                     {"resources", {{{"name", "cpu"}, {"capacity", std::to_string(cpus + 2)}, {"allocatable", std::to_string(cpus)},
                                     {"available", "0"}},
                                    {{"name", "memory"}, {"capacity", std::to_string(memory)},
                                     {"allocatable", std::to_string(memory)}, {"available", "0"}}}}});
  }
  return {{"metadata", {{"name", name}}},
          {"zones", zones},
          {"attributes", {{{"name", "topologyManagerPolicy"}, {"value", "single-numa-node"}},
                          {{"name", "topologyManagerScope"}, {"value", "pod"}}}}};
}

json two_generations_nrts() {
  return {{"kind", "NodeResourceTopologyList"},
          {"items", {nrt_item("e5-1", 26, 120 * kGi), nrt_item("e5-2", 26, 120 * kGi), nrt_item("gold-1", 46, 180 * kGi)}}};
}

kube::fleet::FleetPlan plan_for(const PoolSpec& pool) {
  auto nodes = fleet_of(node_list({{"e5-1", {}}, {"e5-2", {}}, {"gold-1", {}}}), two_generations_nrts(), pool.node_selector);
  EXPECT_TRUE(nodes) << nodes.error().message;
  auto plan = kube::fleet::plan_fleet(nodes.value_or(std::vector<kube::fleet::FleetNode>{}), pool.sizing);
  EXPECT_TRUE(plan) << plan.error().message;
  return plan.value_or(kube::fleet::FleetPlan{});
}

std::string class_of_node(const kube::fleet::FleetPlan& plan, const std::string& node) {
  for (const auto& c : plan.classes) {
    if (std::find(c.nodes.begin(), c.nodes.end(), node) != c.nodes.end()) return c.name;
  }
  return "";
}

const json* find(const std::vector<json>& objects, const std::string& kind, const std::string& class_of_node,
                 const kube::fleet::FleetPlan& plan) {
  for (const auto& c : plan.classes) {
    if (std::find(c.nodes.begin(), c.nodes.end(), class_of_node) == c.nodes.end()) continue;
    for (const auto& o : objects) {
      if (o["kind"] == kind && o["metadata"]["name"] == "ranking-" + c.name) return &o;
    }
  }
  return nullptr;
}

TEST(ServingPool, EachClassGetsItsDeploymentAndBudgetOnItsOwnNodes) {
  const PoolSpec pool = parsed({{"container", "numaserve"}, {"maxUnavailable", "25%"}});
  const auto plan = plan_for(pool);
  ASSERT_EQ(plan.classes.size(), 2u);
  const auto objects = desired_objects(pool, plan);
  ASSERT_EQ(objects.size(), 4u);
  const json* e5 = find(objects, "Deployment", "e5-1", plan);
  const json* gold = find(objects, "Deployment", "gold-1", plan);
  ASSERT_TRUE(e5 && gold);
  EXPECT_EQ((*e5)["spec"]["replicas"], 4);    // 2 nodes x 2 NUMA nodes
  EXPECT_EQ((*gold)["spec"]["replicas"], 2);  // 1 node x 2
  const json& pod = (*e5)["spec"]["template"];
  const std::string e5_class = (*e5)["metadata"]["labels"][kClassLabel];
  EXPECT_EQ(pod["metadata"]["labels"]["app"], "ranker");  // the template's own labels stay
  EXPECT_EQ(pod["metadata"]["labels"][kClassLabel], e5_class);
  EXPECT_EQ((*e5)["spec"]["selector"]["matchLabels"], json({{kPoolLabel, "ranking"}, {kClassLabel, e5_class}}));
  const json terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(terms[0]["matchExpressions"][0], json({{"key", kClassLabel}, {"operator", "In"}, {"values", {e5_class}}}));
  // The named container is sized, Guaranteed; the other is left alone.
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("resources"));
  const json& resources = pod["spec"]["containers"][1]["resources"];
  EXPECT_EQ(resources["requests"], resources["limits"]);
  EXPECT_EQ(resources["limits"]["cpu"], "26");
  EXPECT_EQ((*gold)["spec"]["template"]["spec"]["containers"][1]["resources"]["limits"]["cpu"], "46");
  // No surge on a packed cluster; the rollout's pace is the pool's.
  EXPECT_EQ((*e5)["spec"]["strategy"]["rollingUpdate"], json({{"maxSurge", 0}, {"maxUnavailable", "25%"}}));
  EXPECT_EQ((*e5)["metadata"]["ownerReferences"][0]["uid"], "u-1");
  EXPECT_TRUE((*e5)["metadata"]["ownerReferences"][0]["controller"].get<bool>());
  const json* pdb = find(objects, "PodDisruptionBudget", "e5-1", plan);
  ASSERT_TRUE(pdb);
  EXPECT_EQ((*pdb)["spec"]["selector"], (*e5)["spec"]["selector"]);
}

TEST(ServingPool, TheTemplatesOwnSpreadCountsPerClassAndAnotherIsLeftAlone) {
  json t = pool_object()["spec"]["template"];
  const json own = {{"maxSkew", 1}, {"topologyKey", "kubernetes.io/hostname"}, {"whenUnsatisfiable", "DoNotSchedule"},
                    {"labelSelector", {{"matchLabels", {{"app", "ranker"}}}}}};
  json other = own;
  other["labelSelector"]["matchLabels"] = {{"app", "cache"}};
  t["spec"]["topologySpreadConstraints"] = {own, other};
  const PoolSpec pool = parsed({{"template", t}});
  const auto plan = plan_for(pool);
  const auto objects = desired_objects(pool, plan);
  const json* e5 = find(objects, "Deployment", "e5-1", plan);
  ASSERT_TRUE(e5);
  const std::string e5_class = (*e5)["metadata"]["labels"][kClassLabel];
  const json& spread = (*e5)["spec"]["template"]["spec"]["topologySpreadConstraints"];
  ASSERT_EQ(spread.size(), 2u);
  EXPECT_EQ(spread[0]["labelSelector"]["matchLabels"], json({{"app", "ranker"}, {kClassLabel, e5_class}}));
  EXPECT_EQ(spread[1], other);
  // Without one, the operator's own: the class's pods over its machines.
  const auto plain = desired_objects(parsed(), plan);
  const json& made = find(plain, "Deployment", "e5-1", plan)->at("spec")["template"]["spec"]["topologySpreadConstraints"];
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0]["labelSelector"]["matchLabels"], json({{kPoolLabel, "ranking"}, {kClassLabel, e5_class}}));
}

// Traffic that follows capacity: a Service per class selecting its pods
// only, and an HTTPRoute weighting each by the CPUs its ready replicas serve.
TEST(ServingPool, EachClassGetsAServiceAndTheRouteWeighsThemByReadyCpus) {
  const json ports = json::array({{{"name", "http"}, {"port", 8080}, {"targetPort", "http"}}});
  const PoolSpec pool = parsed({{"service", {{"ports", ports}}},
                                {"httpRoute", {{"parentRefs", {{{"name", "gw"}}}}, {"hostnames", {"rank.example"}}}}});
  const auto plan = plan_for(pool);
  const std::string e5 = class_of_node(plan, "e5-1"), gold = class_of_node(plan, "gold-1");
  const auto objects = desired_objects(pool, plan, {{e5, 3}, {gold, 2}});
  ASSERT_EQ(objects.size(), 2 * 3 + 1u);
  const json* service = find(objects, "Service", "e5-1", plan);
  ASSERT_TRUE(service);
  EXPECT_EQ((*service)["spec"]["selector"], json({{kPoolLabel, "ranking"}, {kClassLabel, e5}}));
  EXPECT_EQ((*service)["spec"]["ports"], ports);
  const auto route = std::find_if(objects.begin(), objects.end(), [](const json& o) { return o["kind"] == "HTTPRoute"; });
  ASSERT_NE(route, objects.end());
  EXPECT_EQ((*route)["metadata"]["name"], "ranking");
  EXPECT_EQ((*route)["spec"]["parentRefs"], json::array({{{"name", "gw"}}}));
  EXPECT_EQ((*route)["spec"]["hostnames"], json::array({"rank.example"}));
  std::map<std::string, json> weights;
  for (const json& b : (*route)["spec"]["rules"][0]["backendRefs"]) weights[b["name"]] = b["weight"];
  EXPECT_EQ(weights["ranking-" + e5], 26 * 3);  // replica CPUs x ready replicas
  EXPECT_EQ(weights["ranking-" + gold], 46 * 2);
  EXPECT_EQ((*route)["spec"]["rules"][0]["backendRefs"][0]["port"], 8080);
  // None ready: no traffic to the class.
  const auto cold = desired_objects(pool, plan);
  const auto cold_route = std::find_if(cold.begin(), cold.end(), [](const json& o) { return o["kind"] == "HTTPRoute"; });
  EXPECT_EQ((*cold_route)["spec"]["rules"][0]["backendRefs"][0]["weight"], 0);
  EXPECT_TRUE(route_fits(pool, plan));
  // More classes than a rule's backendRefs: refused, naming the field.
  kube::fleet::FleetPlan many = plan;
  while (many.classes.size() <= kMostBackends) many.classes.push_back(many.classes.front());
  const auto refused = route_fits(pool, many);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "spec.httpRoute");
  EXPECT_TRUE(route_fits(parsed(), many));  // no route, no limit
  // A route without Service ports has no backends to weigh.
  const auto no_ports = parse_pool(pool_object({{"httpRoute", {{"parentRefs", {{{"name", "gw"}}}}}}}));
  ASSERT_FALSE(no_ports);
  EXPECT_EQ(no_ports.error().field, "spec.httpRoute");
  const auto bad_port = parse_pool(pool_object({{"service", {{"ports", {{{"port", 0}}}}}}}));
  ASSERT_FALSE(bad_port);
  EXPECT_EQ(bad_port.error().field, "spec.service.ports[0].port");
}

// What a pass writes: the route with the rest; while a class is held, or
// when the route cannot hold every class (the pool Degraded), the route
// already there left as it is, the rest still written.
TEST(ServingPool, APassKeepsTheRouteItMayNotWrite) {
  const json ports = json::array({{{"name", "http"}, {"port", 8080}}});
  const PoolSpec pool = parsed({{"service", {{"ports", ports}}}, {"httpRoute", {{"parentRefs", {{{"name", "gw"}}}}}}});
  const auto plan = plan_for(pool);
  auto routes = [](const std::vector<json>& objects) {
    return std::count_if(objects.begin(), objects.end(), [](const json& o) { return o["kind"] == "HTTPRoute"; });
  };
  const PassObjects plain = pass_objects(pool, plan, {}, {});
  EXPECT_EQ(routes(plain.desired), 1);
  EXPECT_FALSE(plain.keep_route);
  EXPECT_FALSE(plain.route_refused);

  const PassObjects holding = pass_objects(pool, plan, {}, {"old-class"});
  EXPECT_EQ(routes(holding.desired), 0);
  EXPECT_EQ(holding.desired.size(), plain.desired.size() - 1);
  EXPECT_TRUE(holding.keep_route);
  EXPECT_FALSE(holding.route_refused);

  kube::fleet::FleetPlan many = plan;
  while (many.classes.size() <= kMostBackends) many.classes.push_back(many.classes.front());
  const PassObjects refused = pass_objects(pool, many, {}, {});
  EXPECT_EQ(routes(refused.desired), 0);
  EXPECT_FALSE(refused.desired.empty());  // the classes' objects still written
  EXPECT_TRUE(refused.keep_route);
  ASSERT_TRUE(refused.route_refused);
  EXPECT_EQ(refused.route_refused->field, "spec.httpRoute");

  const PassObjects unrouted = pass_objects(parsed(), plan, {}, {"old-class"});  // no route to keep
  EXPECT_EQ(routes(unrouted.desired), 0);
  EXPECT_FALSE(unrouted.keep_route);
}

TEST(ServingPool, HeadroomAndUniformSizing) {
  // Two E5 machines and one Gold: 22 CPUs put 89.8% to work.
  const PoolSpec pool = parsed({{"sizing", "uniform"}, {"uniformMinUse", 0.85}, {"headroom", 1}});
  const auto plan = plan_for(pool);
  const auto objects = desired_objects(pool, plan);
  const json* e5 = find(objects, "Deployment", "e5-1", plan);
  const json* gold = find(objects, "Deployment", "gold-1", plan);
  ASSERT_TRUE(e5 && gold);
  // 22 CPUs: one per E5 NUMA node, two per Gold one; one slot of each class left free.
  EXPECT_EQ((*e5)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"], "22");
  EXPECT_EQ((*e5)["spec"]["replicas"], 4 - 1);
  EXPECT_EQ((*gold)["spec"]["replicas"], 4 - 1);
}

// spec.autoscaling: an HPA per class bounded by its NUMA slots (less the
// headroom), the Deployment's replicas left to it; on CPU or saturation.
TEST(ServingPool, AutoscalingGivesEachClassAnHpaBoundedByItsSlots) {
  const PoolSpec pool = parsed({{"headroom", 1},
                                {"autoscaling", {{"minReplicas", 2}, {"metric", "saturation"}, {"targetSaturation", "650m"}}}});
  const auto plan = plan_for(pool);
  const auto objects = desired_objects(pool, plan);
  ASSERT_EQ(objects.size(), 6u);  // Deployment, PDB, HPA per class
  const json* e5 = find(objects, "Deployment", "e5-1", plan);
  const json* e5_hpa = find(objects, "HorizontalPodAutoscaler", "e5-1", plan);
  const json* gold_hpa = find(objects, "HorizontalPodAutoscaler", "gold-1", plan);
  ASSERT_TRUE(e5 && e5_hpa && gold_hpa);
  EXPECT_FALSE((*e5)["spec"].contains("replicas"));  // the HPA's
  EXPECT_EQ((*e5_hpa)["spec"]["scaleTargetRef"], json({{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"name", (*e5)["metadata"]["name"]}}));
  EXPECT_EQ((*e5_hpa)["spec"]["maxReplicas"], 4 - 1);   // 2 nodes x 2 NUMA nodes, less the headroom
  EXPECT_EQ((*e5_hpa)["spec"]["minReplicas"], 2);
  EXPECT_EQ((*gold_hpa)["spec"]["maxReplicas"], 2 - 1);
  EXPECT_EQ((*gold_hpa)["spec"]["minReplicas"], 1);     // never above the most
  EXPECT_EQ((*e5_hpa)["spec"]["metrics"][0],
            json({{"type", "Pods"},
                  {"pods", {{"metric", {{"name", "numaserve_saturation"}}}, {"target", {{"type", "AverageValue"}, {"averageValue", "650m"}}}}}}));
  const PoolSpec cpu = parsed({{"autoscaling", json::object()}});
  const auto cpu_objects = desired_objects(cpu, plan_for(cpu));
  const json* hpa = find(cpu_objects, "HorizontalPodAutoscaler", "e5-1", plan);
  ASSERT_TRUE(hpa);
  EXPECT_EQ((*hpa)["spec"]["metrics"][0]["resource"]["target"], json({{"type", "Utilization"}, {"averageUtilization", 70}}));
  const PoolSpec off = parsed({{"autoscaling", {{"enabled", false}}}});
  const auto off_objects = desired_objects(off, plan_for(off));
  EXPECT_EQ(find(off_objects, "HorizontalPodAutoscaler", "e5-1", plan), nullptr);
  EXPECT_EQ((*find(off_objects, "Deployment", "e5-1", plan))["spec"]["replicas"], 4);
}

TEST(ServingPool, TheNodeSelectorBoundsThePoolsFleet) {
  auto nodes = fleet_of(node_list({{"e5-1", {{"pool", "a"}}}, {"e5-2", {}}, {"gold-1", {{"pool", "a"}}}}),
                        two_generations_nrts(), {{"pool", "a"}});
  ASSERT_TRUE(nodes) << nodes.error().message;
  std::vector<std::string> names;
  for (const auto& n : *nodes) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"e5-1", "gold-1"}));
}

// A Node of the pool labelled with a class the plan no longer has (its
// topology unread) holds that class: its objects stay. One outside the
// pool's selector, or of a class the plan has, holds nothing.
TEST(ServingPool, AClassOnlyUnreadNodesStillCarryIsHeld) {
  const kube::fleet::FleetPlan plan = plan_for(parsed());
  const std::map<std::string, std::string> selector = {{"pool", "a"}};
  ASSERT_FALSE(plan.classes.empty());
  const std::string planned = plan.classes.front().name;
  const json nodes = node_list({{"e5-1", {{"pool", "a"}, {kClassLabel, planned}}},
                                {"gone-1", {{"pool", "a"}, {kClassLabel, "old-class"}}},
                                {"other-1", {{kClassLabel, "elsewhere"}}},
                                {"new-1", {{"pool", "a"}}}});
  EXPECT_EQ(held_classes(nodes, selector, plan), (std::set<std::string>{"old-class"}));
  EXPECT_TRUE(held_classes(json::object(), selector, plan).empty());  // a reply without items
}

TEST(ServingPool, MistakesTheSchemaCannotCatchNameTheField) {
  auto no_container = parse_pool(pool_object({{"container", "missing"}}));
  ASSERT_FALSE(no_container);
  EXPECT_EQ(no_container.error().field, "spec.container");
  json empty = pool_object();
  empty["spec"]["template"]["spec"]["containers"] = json::array();
  EXPECT_EQ(parse_pool(empty).error().field, "spec.template.spec.containers");
  EXPECT_EQ(parse_pool(pool_object({{"podMemoryFraction", 1.5}})).error().field, "spec.podMemoryFraction");
  EXPECT_EQ(parse_pool(pool_object({{"sizing", "half"}})).error().field, "spec.sizing");
  EXPECT_EQ(parse_pool(pool_object({{"container", 7}})).error().field, "spec.container");
  EXPECT_EQ(parse_pool(pool_object({{"autoscaling", {{"metric", "memory"}}}})).error().field, "spec.autoscaling.metric");
  EXPECT_EQ(parse_pool(pool_object({{"autoscaling", {{"minReplicas", 0}}}})).error().field, "spec.autoscaling.minReplicas");
  EXPECT_EQ(parse_pool(pool_object({{"hugepagesPerReplica", {{"hugepages-2Mi", "lots"}}}})).error().field,
            "spec.hugepagesPerReplica.hugepages-2Mi");
  EXPECT_EQ(parsed({{"hugepagesPerReplica", {{"hugepages-2Mi", "1Gi"}}}}).sizing.hugepages_per_replica.at("hugepages-2Mi"),
            1ull << 30);
  json list_affinity = pool_object();
  list_affinity["spec"]["template"]["spec"]["affinity"] = json::array();
  EXPECT_EQ(parse_pool(list_affinity).error().field, "spec.template.spec.affinity");
  json nameless = pool_object();
  nameless["spec"]["template"]["spec"]["containers"][0].erase("name");
  EXPECT_EQ(parse_pool(nameless).error().field, "spec.template.spec.containers[0].name");
  json long_name = pool_object();
  long_name["metadata"]["name"] = std::string(50, 'a');
  EXPECT_EQ(parse_pool(long_name).error().field, "metadata.name");
  // The API server admits dots and (through the fuzzer's eyes) anything;
  // <pool>-<class> must still be a Deployment's name.
  for (const char* name : {"Ranking", "a.b", "-a", "a-", "a_b"}) {
    json odd = pool_object();
    odd["metadata"]["name"] = name;
    ASSERT_FALSE(parse_pool(odd).has_value()) << name;
    EXPECT_EQ(parse_pool(odd).error().field, "metadata.name") << name;
  }
}

TEST(Contains, WhatTheServerAddedIsNotADifferenceWhatWeSetIs) {
  const json desired = {{"spec", {{"replicas", 4}, {"template", {{"labels", json::object()}, {"ports", {{{"port", 80}}}}}}}}};
  json live = {{"metadata", {{"resourceVersion", "7"}}},
               {"spec", {{"replicas", 4}, {"revisionHistoryLimit", 10},
                         {"template", {{"ports", {{{"port", 80}, {"protocol", "TCP"}}}}}}}}};
  EXPECT_TRUE(contains(live, desired));  // defaults added, an empty map dropped
  live["spec"]["replicas"] = 3;          // someone scaled it
  EXPECT_FALSE(contains(live, desired));
  live["spec"]["replicas"] = 4;
  live["spec"]["template"]["ports"].push_back({{"port", 81}});
  EXPECT_FALSE(contains(live, desired));  // lists are the whole list
  EXPECT_TRUE(contains(json{{"f", 0.9}}, json{{"f", 0.9}}));
  EXPECT_TRUE(contains(json{{"n", 2}}, json{{"n", 2.0}}));
}

TEST(Refusals, KubeletAdmissionFailuresOnly) {
  const auto pod = [](const char* phase, const char* reason) {
    return json{{"status", {{"phase", phase}, {"reason", reason}}}};
  };
  EXPECT_TRUE(refused_at_admission(pod("Failed", "TopologyAffinityError")));
  EXPECT_TRUE(refused_at_admission(pod("Failed", "OutOfcpu")));
  EXPECT_TRUE(refused_at_admission(pod("Failed", "SMTAlignmentError")));
  EXPECT_FALSE(refused_at_admission(pod("Failed", "Evicted")));
  EXPECT_FALSE(refused_at_admission(pod("Pending", "TopologyAffinityError")));
}

TEST(Refusals, EachNodeBacksOffAndIsReportedNotHammered) {
  Refusals r(seconds(1), seconds(8), seconds(60));
  const auto t0 = Refusals::Clock::time_point{} + seconds(1000);
  EXPECT_TRUE(r.admit_delete("n1", "TopologyAffinityError", t0));
  EXPECT_FALSE(r.admit_delete("n1", "TopologyAffinityError", t0));  // within 1 s
  EXPECT_TRUE(r.admit_delete("n2", "OutOfcpu", t0));                // another node: its own backoff
  EXPECT_TRUE(r.admit_delete("n1", "TopologyAffinityError", t0 + seconds(1)));
  EXPECT_FALSE(r.admit_delete("n1", "TopologyAffinityError", t0 + seconds(2)));  // now 2 s
  EXPECT_TRUE(r.admit_delete("n1", "TopologyAffinityError", t0 + seconds(3)));
  EXPECT_EQ(r.deleted(), 4u);
  EXPECT_EQ(r.deferred(), 2u);
  const auto repeated = r.repeated(3, t0 + seconds(3));
  ASSERT_EQ(repeated.size(), 1u);
  EXPECT_EQ(repeated.at("n1").refusals, 3u);
  // The waits double up to the most, and a quiet node is forgotten.
  EXPECT_TRUE(r.admit_delete("n1", "x", t0 + seconds(7)));
  EXPECT_FALSE(r.admit_delete("n1", "x", t0 + seconds(14)));
  EXPECT_TRUE(r.admit_delete("n1", "x", t0 + seconds(15)));
  EXPECT_TRUE(r.repeated(3, t0 + seconds(200)).empty());
  EXPECT_TRUE(r.admit_delete("n1", "x", t0 + seconds(200)));
  EXPECT_TRUE(r.repeated(2, t0 + seconds(200)).empty());
}

json condition(const json& status, const std::string& type) {
  for (const json& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  ADD_FAILURE() << "no condition " << type << " in " << status.dump();
  return json::object();
}

// A pass that found every class's replicas ready.
PassReport all_ready(const PoolSpec& pool, const kube::fleet::FleetPlan& plan) {
  PassReport pass;
  for (const auto& c : plan.classes) pass.ready[c.name] = desired_replicas(pool, c);
  return pass;
}

TEST(PoolStatus, AvailableProgressingDegradedWithReasonsAndTransitionTimesKept) {
  const PoolSpec pool = parsed();  // maxUnavailable 1 per class
  const auto plan = plan_for(pool);
  PassReport pass = all_ready(pool, plan);
  Refusals refusals;
  const auto now = Refusals::Clock::now();
  const json ready = pool_status(pool, &plan, pass, refusals, json::object(), "2026-12-02T00:00:00Z", now);
  EXPECT_EQ(condition(ready, "Available")["status"], "True");
  EXPECT_EQ(condition(ready, "Available")["reason"], "MinimumReplicasAvailable");
  EXPECT_EQ(condition(ready, "Progressing")["status"], "False");
  EXPECT_EQ(condition(ready, "Progressing")["reason"], "AllReplicasReady");
  EXPECT_EQ(condition(ready, "Degraded")["status"], "False");
  EXPECT_EQ(ready["observedGeneration"], 3);
  EXPECT_EQ(ready["classes"].size(), 2u);
  EXPECT_EQ(ready["classes"][0]["replicasPerMachine"], 2);
  EXPECT_EQ(ready["cpusUsed"], 2 * 2 * 26 + 2 * 46);
  // One Service: six replicas loaded as the 26-CPU ones saturate.
  EXPECT_DOUBLE_EQ(ready["traffic"]["equalSplitShare"].get<double>(), 6.0 * 26 / (2 * 2 * 26 + 2 * 46));
  EXPECT_NE(ready["traffic"]["message"].get<std::string>().find("spec.httpRoute"), std::string::npos);
  // Unchanged a minute later: the same status, so nothing to write.
  EXPECT_EQ(pool_status(pool, &plan, pass, refusals, ready, "2026-12-02T00:01:00Z", now), ready);

  // One replica short of a class is within maxUnavailable: still available, progressing.
  const std::string first = plan.classes[0].name;
  pass.ready[first] -= 1;
  const json one_short = pool_status(pool, &plan, pass, refusals, ready, "2026-12-02T00:02:00Z", now);
  EXPECT_EQ(condition(one_short, "Available")["status"], "True");
  EXPECT_EQ(condition(one_short, "Available")["lastTransitionTime"], "2026-12-02T00:00:00Z");
  EXPECT_EQ(condition(one_short, "Progressing")["status"], "True");
  EXPECT_EQ(condition(one_short, "Progressing")["reason"], "ReplicasNotReady");
  EXPECT_EQ(condition(one_short, "Progressing")["lastTransitionTime"], "2026-12-02T00:02:00Z");
  // Two short is not; a pass that applied objects says so.
  pass.ready[first] -= 1;
  pass.applied = 2;
  const json two_short = pool_status(pool, &plan, pass, refusals, one_short, "2026-12-02T00:03:00Z", now);
  EXPECT_EQ(condition(two_short, "Available")["status"], "False");
  EXPECT_EQ(condition(two_short, "Available")["reason"], "MinimumReplicasUnavailable");
  EXPECT_NE(condition(two_short, "Available")["message"].get<std::string>().find(first), std::string::npos);
  EXPECT_EQ(condition(two_short, "Progressing")["reason"], "ObjectsApplied");

  // A pass that failed is Degraded with its reason, and says what failed.
  PassReport failed_pass;
  failed_pass.error = "no node can be planned";
  failed_pass.fault = "NoPlan";
  const json failed = pool_status(pool, nullptr, failed_pass, refusals, ready, "t", now);
  EXPECT_EQ(failed["lastError"], "no node can be planned");
  EXPECT_EQ(condition(failed, "Degraded")["status"], "True");
  EXPECT_EQ(condition(failed, "Degraded")["reason"], "NoPlan");
  EXPECT_EQ(condition(failed, "Available")["reason"], "NoPlan");

  // Nodes that keep refusing pods degrade a pool that is otherwise served.
  pass = all_ready(pool, plan);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(refusals.admit_delete("gold-1", "TopologyAffinityError", now + std::chrono::minutes(6 * i)));
  const json refusing = pool_status(pool, &plan, pass, refusals, ready, "t2", now + std::chrono::minutes(12));
  EXPECT_EQ(condition(refusing, "Degraded")["reason"], "NodesRefusingPods");
  EXPECT_EQ(condition(refusing, "Available")["status"], "True");
}

// A pass that could not read what it needs knows nothing new: the last
// status's classes, ready replicas and Available stay; Degraded says why.
TEST(PoolStatus, AReadThatFailedChangesOnlyDegradedAndTheError) {
  const PoolSpec pool = parsed();
  const auto plan = plan_for(pool);
  PassReport pass = all_ready(pool, plan);
  Refusals refusals;
  const auto now = Refusals::Clock::now();
  const json ready = pool_status(pool, &plan, pass, refusals, json::object(), "t0", now);

  PassReport unread;
  unread.error = "GET /apis/apps/v1/namespaces/ranking/deployments: no answer";
  unread.fault = "ApiServerError";
  unread.read_failed = true;  // the ready replicas read nothing: zero for every class
  for (const kube::fleet::FleetPlan* with : {&plan, static_cast<const kube::fleet::FleetPlan*>(nullptr)}) {
    const json status = pool_status(pool, with, unread, refusals, ready, "t1", now);
    EXPECT_EQ(status["classes"], ready["classes"]);
    EXPECT_EQ(condition(status, "Available"), condition(ready, "Available"));
    EXPECT_EQ(condition(status, "Progressing"), condition(ready, "Progressing"));
    EXPECT_EQ(condition(status, "Degraded")["status"], "True");
    EXPECT_EQ(condition(status, "Degraded")["reason"], "ApiServerError");
    EXPECT_EQ(condition(status, "Degraded")["lastTransitionTime"], "t1");
    EXPECT_EQ(status["lastError"], unread.error);
  }
  // With no status before it, there is nothing to keep: the pass's own.
  EXPECT_EQ(condition(pool_status(pool, &plan, unread, refusals, json::object(), "t1", now), "Available")["status"], "False");
}

TEST(PoolStatus, NodesWithoutTopologyDegradeAPoolThatIsOtherwiseServed) {
  const PoolSpec pool = parsed();
  const auto plan = plan_for(pool);
  PassReport pass = all_ready(pool, plan);
  pass.remembered_topologies = {"e5-1"};
  Refusals refusals;
  const auto now = Refusals::Clock::now();
  const json remembered = pool_status(pool, &plan, pass, refusals, json::object(), "t", now);
  EXPECT_EQ(condition(remembered, "Available")["status"], "True");
  EXPECT_EQ(condition(remembered, "Degraded")["reason"], "TopologyMissing");
  const std::string message = condition(remembered, "Degraded")["message"];
  EXPECT_NE(message.find("e5-1"), std::string::npos) << message;

  pass.remembered_topologies.clear();
  pass.held_classes = {"mc-0123456789"};
  const std::string held = condition(pool_status(pool, &plan, pass, refusals, json::object(), "t", now), "Degraded")["message"];
  EXPECT_NE(held.find("class mc-0123456789"), std::string::npos) << held;
  EXPECT_NE(held.find("kept"), std::string::npos) << held;

  // A failed pass says its own error first.
  pass.error = "apply x: HTTP 409: conflict";
  pass.fault = "ApiServerError";
  EXPECT_EQ(condition(pool_status(pool, &plan, pass, refusals, json::object(), "t", now), "Degraded")["reason"], "ApiServerError");
}

TEST(ServingPool, ANodeIsSelectedWhenItCarriesEveryLabelOfTheSelector) {
  const json node = {{"metadata", {{"name", "n"}, {"labels", {{"pool", "ranking"}, {"zone", "a"}}}}}};
  EXPECT_TRUE(selected(node, {}));
  EXPECT_TRUE(selected(node, {{"pool", "ranking"}}));
  EXPECT_TRUE(selected(node, {{"pool", "ranking"}, {"zone", "a"}}));
  EXPECT_FALSE(selected(node, {{"pool", "ranking"}, {"zone", "b"}}));
  EXPECT_FALSE(selected(json{{"metadata", {{"name", "bare"}}}}, {{"pool", "ranking"}}));
}

TEST(PoolStatus, MaxUnavailableAsACountOrAPercentageRoundedDown) {
  EXPECT_EQ(max_unavailable_of(2, 10), 2);
  EXPECT_EQ(max_unavailable_of("25%", 10), 2);
  EXPECT_EQ(max_unavailable_of("25%", 3), 0);
  EXPECT_EQ(max_unavailable_of("100%", 4), 4);
  EXPECT_EQ(max_unavailable_of("x", 4), 0);
}

TEST(LeaderElection, OneHolderAtATimeTakeoverOnlyAfterItsLeaseRanOut) {
  using Clock = LeaderElection::Clock;
  LeaderElection a("a", "ns", "lease", 15), b("b", "ns", "lease", 15);
  const auto t0 = Clock::time_point{} + seconds(100);
  auto created = a.next(nullptr, t0, "T0");
  ASSERT_TRUE(created);
  EXPECT_EQ((*created)["spec"]["holderIdentity"], "a");
  json lease = *created;
  lease["metadata"]["resourceVersion"] = "1";
  // b sees a's lease: it waits while a renews...
  EXPECT_FALSE(b.next(lease, t0, "T0"));
  auto renewed = a.next(lease, t0 + seconds(5), "T5");
  ASSERT_TRUE(renewed);
  EXPECT_EQ((*renewed)["metadata"]["resourceVersion"], "1");  // the PUT is conditional
  EXPECT_EQ((*renewed)["spec"]["renewTime"], "T5");
  EXPECT_FALSE(b.next(*renewed, t0 + seconds(10), "T10"));
  // ...and takes over once the record stood still for the lease's duration by its own clock.
  EXPECT_FALSE(b.next(*renewed, t0 + seconds(24), "T24"));
  auto taken = b.next(*renewed, t0 + seconds(26), "T26");
  ASSERT_TRUE(taken);
  EXPECT_EQ((*taken)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*taken)["spec"]["leaseTransitions"], 1);
  // A released lease (no holder) is taken at once.
  json released = *taken;
  released["spec"]["holderIdentity"] = "";
  EXPECT_TRUE(a.next(released, t0 + seconds(27), "T27"));
}

}  // namespace
}  // namespace numaserve::op::pool
