#pragma once
// What the agent tells the cluster about its node: the NodeResourceTopology
// object (topology.node.k8s.io/v1alpha2, read by the scheduler-plugins
// NodeResourceTopologyMatch plugin) and node labels for nodeSelectors.

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "discover/discover.h"
#include "plan/plan.h"

namespace numaserve::agent::publish {

// Zones "node-<id>" of type Node with costs from the distance matrix and
// cpu / memory / hugepages-<size> resources: capacity (the node's), allocatable
// (after the plan's reservations) and available (allocatable less what the
// kubelet's CPU and Memory Managers have assigned, when their state is read);
// attributes topologyManagerPolicy/Scope when the kubelet config is read.
nlohmann::json make_node_resource_topology(const std::string& node_name,
                                           const discover::NodeReport& report,
                                           const plan::Plan& plan);

// numaserve.io/* labels; values are valid Kubernetes label values.
std::map<std::string, std::string> make_node_labels(const discover::NodeReport& report,
                                                    const plan::Plan& plan);

}  // namespace numaserve::agent::publish
