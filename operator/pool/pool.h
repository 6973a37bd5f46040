#pragma once
// What a ServingPool (numaserve.io/v1alpha1) asks for, read from the object
// the API server returns, and the fleet it is served on: the Node and
// NodeResourceTopology lists, as `cluster-plan` reads them from files.
// The rest of the operator's decisions, each pure, one job a file:
// objects.h (the Deployments and budgets wanted), compare.h (whether a live
// object already is one), refusals.h (pods the kubelet refused), status.h
// (the pool's status and conditions), election.h (the Lease).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/fleet.h"
#include "numaserve/common/result.h"

namespace numaserve::op::pool {


inline constexpr const char* kFieldManager = "numaserve-operator";
inline constexpr const char* kApiVersion = "numaserve.io/v1alpha1";
inline constexpr const char* kPoolLabel = "numaserve.io/pool";
inline constexpr const char* kClassLabel = kube::fleet::label::kMachineClass;

struct PoolSpec {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::int64_t generation = 0;
  nlohmann::json pod_template;  // spec.template: the service's PodTemplateSpec
  std::string container;        // the container sized per class ("" = the first)
  kube::fleet::FleetConfig sizing;
  unsigned headroom = 0;                  // NUMA slots left free per class
  nlohmann::json max_unavailable = 1;     // per class: rollouts and the PDB
  std::map<std::string, std::string> node_selector;  // the pool's nodes; empty: every node
  // spec.service.ports: each class's Service's ports (ServicePorts); empty:
  // no Service per class. The first is the one an HTTPRoute sends to.
  nlohmann::json service_ports = nlohmann::json::array();
  // spec.httpRoute: an HTTPRoute weighting each class's Service by its ready
  // CPUs, under these parents (Gateways, or a Service in a GAMMA mesh); no
  // parent: no route.
  nlohmann::json route_parents = nlohmann::json::array();
  nlohmann::json route_hostnames = nlohmann::json::array();
  // spec.autoscaling: a HorizontalPodAutoscaler per class, from minReplicas
  // to the class's replicas (its NUMA slots less the headroom), on the pods'
  // CPU or on numaserve_saturation (a Pods metric); the Deployments' replicas
  // are then the HPAs'.
  struct Autoscaling {
    bool enabled = false;
    std::int64_t min_replicas = 1;
    bool saturation = false;                    // metric: saturation, else cpu
    std::int64_t target_cpu_percent = 70;       // targetCPUUtilizationPercentage
    std::string target_saturation = "700m";     // targetSaturation: each replica's numaserve_saturation, on average
  } autoscaling;
};

// From the ServingPool object as the API server returns it. The CRD's schema
// already refused most mistakes; what it cannot check is named by field.
Result<PoolSpec> parse_pool(const nlohmann::json& object);

// Whether a Node object carries every label of the pool's node selector.
bool selected(const nlohmann::json& node, const std::map<std::string, std::string>& node_selector);

// The classes a Node of the pool (`node_list`: the API server's reply) is
// still labelled with that `plan` has no more: their topology went unread
// (its NodeResourceTopology gone before this process ever read it, or
// unreadable), so their objects are kept, not deleted, and the route keeps
// its backends.
std::set<std::string> held_classes(const nlohmann::json& node_list, const std::map<std::string, std::string>& node_selector,
                                   const kube::fleet::FleetPlan& plan);

// The pool's fleet: the Node and NodeResourceTopology list replies (items
// without kind, as the API server sends them), nodes outside the pool's
// node selector left out.
Result<std::vector<kube::fleet::FleetNode>> fleet_of(const nlohmann::json& node_list, const nlohmann::json& nrt_list,
                                               const std::map<std::string, std::string>& node_selector);

}  // namespace numaserve::op::pool
