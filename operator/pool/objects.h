#pragma once
// The objects that serve a pool on its plan: per machine class one
// Deployment, one PodDisruptionBudget and (spec.service) one Service, named
// <pool>-<class>, labelled with the pool and the class; and (spec.httpRoute)
// one HTTPRoute named <pool> weighting the classes' Services by the CPUs
// their ready replicas serve with. All owned by the pool.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pool/pool.h"

namespace numaserve::op::pool {

// A class's replicas: every NUMA slot of its machines, less the headroom.
std::int64_t desired_replicas(const PoolSpec& pool, const fleet::ClassPlan& c);

// The most backendRefs an HTTPRoute rule takes (Gateway API v1).
inline constexpr std::size_t kMostBackends = 16;

// `ready`: each class's ready replicas (its route weight's factor).
std::vector<nlohmann::json> desired_objects(const PoolSpec& pool, const fleet::FleetPlan& plan,
                                            const std::map<std::string, std::int64_t>& ready = {});
// Whether the pool's route can hold a backend per class.
Status route_fits(const PoolSpec& pool, const fleet::FleetPlan& plan);

}  // namespace numaserve::op::pool
