#pragma once
// The objects that serve a pool on its plan: per machine class one
// Deployment, one PodDisruptionBudget, (spec.service) one Service and
// (spec.autoscaling) one HorizontalPodAutoscaler, named
// <pool>-<class>, labelled with the pool and the class; and (spec.httpRoute)
// one HTTPRoute named <pool> weighting the classes' Services by the CPUs
// their ready replicas serve with. All owned by the pool.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pool/pool.h"

namespace numaserve::op::pool {

// A class's replicas: every NUMA slot of its machines, less the headroom.
std::int64_t desired_replicas(const PoolSpec& pool, const kube::fleet::ClassPlan& c);

// The most backendRefs an HTTPRoute rule takes (Gateway API v1).
inline constexpr std::size_t kMostBackends = 16;

// `ready`: each class's ready replicas (its route weight's factor).
std::vector<nlohmann::json> desired_objects(const PoolSpec& pool, const kube::fleet::FleetPlan& plan,
                                            const std::map<std::string, std::int64_t>& ready = {});
// Whether the pool's route can hold a backend per class.
Status route_fits(const PoolSpec& pool, const kube::fleet::FleetPlan& plan);

// What a pass writes for the pool on `plan`: `desired` to create or update;
// the route, when `keep_route`, left as it is (not written, not deleted):
// refused (`route_refused`, the pool Degraded: deleting it would cut the
// Gateway's traffic off) or while a class is `held` (written from this
// plan, it would take the held class's traffic away).
struct PassObjects {
  std::vector<nlohmann::json> desired;
  bool keep_route = false;
  std::optional<Error> route_refused;
};
PassObjects pass_objects(const PoolSpec& pool, const kube::fleet::FleetPlan& plan, const std::map<std::string, std::int64_t>& ready,
                         const std::set<std::string>& held);

}  // namespace numaserve::op::pool
