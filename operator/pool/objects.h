#pragma once
// The objects that serve a pool on its plan: per machine class one
// Deployment and one PodDisruptionBudget, named <pool>-<class>, labelled
// with the pool and the class, owned by the pool.

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "pool/pool.h"

namespace numaserve::op::pool {

// A class's replicas: every NUMA slot of its machines, less the headroom.
std::int64_t desired_replicas(const PoolSpec& pool, const fleet::ClassPlan& c);

std::vector<nlohmann::json> desired_objects(const PoolSpec& pool, const fleet::FleetPlan& plan);

}  // namespace numaserve::op::pool
