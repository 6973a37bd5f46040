#pragma once
// JSON views of the topology and placement models: what the agent publishes,
// what /placement returns, and the canonical form of golden test files (keys
// sorted by nlohmann::json, no versions or timestamps). The topology reads
// back as well: an XML file's discovery runs in a child process, which sends
// its model to the parent this way (topology_child.cpp). from_json throws
// nlohmann's exceptions on a missing key or wrong type, and
// std::invalid_argument on a bad CPU list.

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

void from_json(const nlohmann::json& j, CpuSet& set);
void from_json(const nlohmann::json& j, NumaNode& node);
void from_json(const nlohmann::json& j, Package& package);
void from_json(const nlohmann::json& j, DistanceMatrix& distances);
void from_json(const nlohmann::json& j, Topology& topology);

}  // namespace numaserve
