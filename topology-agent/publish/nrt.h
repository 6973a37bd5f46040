#pragma once
// What the agent tells the cluster about its node: the NodeResourceTopology
// object (topology.node.k8s.io/v1alpha2, read by the scheduler-plugins
// NodeResourceTopologyMatch plugin) and node labels for nodeSelectors. Both
// are made with or without a plan: discovery alone is always published.

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "discover/discover.h"
#include "plan/plan.h"
#include "publish/fingerprint.h"

namespace numaserve::agent::publish {

// Zones "node-<id>" of type Node with costs from the distance matrix and
// cpu / memory / hugepages-<size> resources: capacity (the hardware's),
// allocatable (the kubelet's own figure from its PodResources API; else the
// plan's room; else the hardware less the kubelet's reserved CPUs) and
// available (allocatable less what pods hold there). Attributes:
// topologyManagerPolicy/Scope when the kubelet config is read; the pod-set
// fingerprint and its method when the kubelet listed its pods.
nlohmann::json make_node_resource_topology(const std::string& node_name, const discover::NodeReport& report,
                                           const plan::NodePlan* plan,
                                           FingerprintMethod method = FingerprintMethod::kWithExclusiveResources);

// numaserve.io/* labels; values are valid Kubernetes label values. The
// replica's labels only with a plan; machine-class is kube::fleet::machine_class()
// of the node's NodeResourceTopology (what cluster-plan groups nodes by).
std::map<std::string, std::string> make_node_labels(const discover::NodeReport& report, const plan::NodePlan* plan);

}  // namespace numaserve::agent::publish
