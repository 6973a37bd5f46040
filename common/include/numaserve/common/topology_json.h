#pragma once
// JSON views of the topology and placement models: what the agent publishes,
// what /placement returns, and the canonical form of golden test files (keys
// sorted by nlohmann::json, no versions or timestamps).

#include <nlohmann/json.hpp>

#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"

namespace numaserve {

void to_json(nlohmann::json& j, const CpuSet& set);  // list form, "0-3,8"
void to_json(nlohmann::json& j, const NumaNode& node);
void to_json(nlohmann::json& j, const Package& package);
void to_json(nlohmann::json& j, const DistanceMatrix& distances);
void to_json(nlohmann::json& j, const Topology& topology);
void to_json(nlohmann::json& j, const CgroupPlacement& cgroup);
void to_json(nlohmann::json& j, const Placement& placement);

}  // namespace numaserve
