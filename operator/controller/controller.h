#pragma once
// `numaserve-operator run`: the in-cluster loop that keeps every
// ServingPool of its namespace served, one Deployment per machine class.
// While it holds the Lease (leader election: one of several replicas acts),
// every resync it lists the pools, the Nodes and the NodeResourceTopology
// objects, plans each pool's fleet (pool/, the plan `cluster-plan` prints),
// server-side applies what differs from the live objects, deletes the
// objects of classes no node has any more, deletes the pods the kubelet
// refused at admission (per-node backoff) and writes the pool's status.
// API server faults are retried and counted, never fatal. Serves /plan
// (each pool's plan), /metrics and /healthz.

#include <chrono>
#include <string>

#include "apiserver/apiserver.h"
#include "http/http.h"

namespace numaserve::op::controller {


struct OperatorConfig {
  kube::apiserver::ApiServerConfig apiserver;
  std::string namespace_name;  // its pools', Deployments' and Lease's
  std::string identity;        // its name in the Lease (the pod's)
  std::string lease_name = "numaserve-operator";
  std::chrono::duration<double> resync{10};
  std::chrono::seconds lease{15};  // renewed every third of it
  kube::http::EndpointConfig endpoint{.host = "0.0.0.0", .port = 9301};
};

// Until SIGTERM or SIGINT (the Lease then released): exit status 0; 1 when
// the endpoint cannot listen.
int run_operator(const OperatorConfig& config);

}  // namespace numaserve::op::controller
