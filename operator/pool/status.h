#pragma once
// The pool's status subresource: per class its machines, desired and ready
// replicas and the replica's size; the nodes left unplanned; the pods the
// kubelet refused; and the three conditions of the Kubernetes API
// conventions, each with a reason:
//   Available   every class has its replicas ready, less maxUnavailable
//               (MinimumReplicasAvailable / MinimumReplicasUnavailable, NoPlan);
//   Progressing the pass changed objects or replicas are not all ready yet
//               (ObjectsApplied / ReplicasNotReady; False: AllReplicasReady, NoPlan);
//   Degraded    the pass failed, nodes keep refusing pods, or nodes of the
//               pool have no NodeResourceTopology now (InvalidPool, NoPlan,
//               ApiServerError, NodesRefusingPods, TopologyMissing; False: AsExpected).
// A pass that could not read what it needs (a list refused, cut, or not
// answered) changes only Degraded and lastError: what the last pass knew of
// classes and replicas stays, rather than zeros the read did not see.
// A condition's lastTransitionTime is kept from the previous status while
// its status is unchanged.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pool/pool.h"
#include "pool/refusals.h"

namespace numaserve::op::pool {

// What one pass over a pool found and did.
struct PassReport {
  std::map<std::string, std::int64_t> ready;  // class -> its Deployment's ready replicas
  unsigned applied = 0;                       // objects written
  std::string error;                          // the last failure ("" none)
  std::string fault;                          // its Degraded reason: InvalidPool, NoPlan, ApiServerError
  bool read_failed = false;                   // the error is a read's: nothing new is known of the pool
  // Nodes of the pool without a NodeResourceTopology now: planned from the
  // last one read (remembered), or not planned and their class's objects
  // kept (held: none read since the operator started).
  std::vector<std::string> remembered_topologies, held_classes;
};

// maxUnavailable (a count or "N%" of `replicas`, rounded down as a
// Deployment rounds it) as a count.
std::int64_t max_unavailable_of(const nlohmann::json& max_unavailable, std::int64_t replicas);

nlohmann::json pool_status(const PoolSpec& pool, const kube::fleet::FleetPlan* plan, const PassReport& pass,
                           const Refusals& refusals, const nlohmann::json& previous, const std::string& now,
                           Refusals::Clock::time_point steady_now);

}  // namespace numaserve::op::pool
