#include "numaserve/common/topology_json.h"

#include <optional>
#include <stdexcept>
#include <string>

namespace numaserve {

void to_json(nlohmann::json& j, const CpuSet& set) { j = set.to_list(); }

void to_json(nlohmann::json& j, const NumaNode& node) {
  nlohmann::json hugepages = nlohmann::json::object();
  for (const auto& [size, count] : node.hugepages) hugepages[std::to_string(size)] = count;
  j = {{"os_index", node.os_index},
       {"cpus", node.cpus},
       {"local_cpus", node.local_cpus},
       {"cores", node.cores},
       {"memory_bytes", node.memory_bytes},
       {"hugepages", hugepages},
       {"kind", node.kind},
       {"memory_only", node.memory_only()}};
}

void to_json(nlohmann::json& j, const Package& package) {
  j = {{"os_index", package.os_index}, {"cpus", package.cpus}, {"nodes", package.nodes}};
}

void to_json(nlohmann::json& j, const DistanceMatrix& distances) {
  nlohmann::json rows = nlohmann::json::array();
  const std::size_t n = distances.nodes.size();
  for (std::size_t i = 0; i < n; ++i) {
    rows.push_back(std::vector<std::uint32_t>(distances.values.begin() + static_cast<long>(i * n),
                                              distances.values.begin() + static_cast<long>((i + 1) * n)));
  }
  j = {{"nodes", distances.nodes}, {"matrix", rows}};
}

void to_json(nlohmann::json& j, const Topology& t) {
  j = {{"source", t.source},
       {"packages", t.packages},
       {"nodes", t.nodes},
       {"distances", t.distances ? nlohmann::json(*t.distances) : nlohmann::json()},
       {"online_cpus", t.online_cpus},
       {"offline_cpus", t.offline_cpus},
       {"offline_nodes", t.offline_nodes},
       {"cpus_without_node", t.cpus_without_node},
       {"allowed_cpus", t.allowed_cpus},
       {"allowed_mems", t.allowed_mems},
       {"threads_per_core", t.threads_per_core()}};
}

void from_json(const nlohmann::json& j, CpuSet& set) {
  auto parsed = CpuSet::parse_list(j.get<std::string>());
  if (!parsed) throw std::invalid_argument(parsed.error().message);
  set = std::move(*parsed);
}

void from_json(const nlohmann::json& j, NumaNode& node) {
  j.at("os_index").get_to(node.os_index);
  j.at("cpus").get_to(node.cpus);
  j.at("local_cpus").get_to(node.local_cpus);
  j.at("cores").get_to(node.cores);
  j.at("memory_bytes").get_to(node.memory_bytes);
  for (const auto& [size, count] : j.at("hugepages").items()) node.hugepages[std::stoull(size)] = count.get<std::uint64_t>();
  j.at("kind").get_to(node.kind);
}

void from_json(const nlohmann::json& j, Package& package) {
  j.at("os_index").get_to(package.os_index);
  j.at("cpus").get_to(package.cpus);
  j.at("nodes").get_to(package.nodes);
}

void from_json(const nlohmann::json& j, DistanceMatrix& distances) {
  j.at("nodes").get_to(distances.nodes);
  distances.values.clear();
  for (const auto& row : j.at("matrix")) {
    for (const auto& value : row) distances.values.push_back(value.get<std::uint32_t>());
  }
}

void from_json(const nlohmann::json& j, Topology& t) {
  j.at("source").get_to(t.source);
  j.at("packages").get_to(t.packages);
  j.at("nodes").get_to(t.nodes);
  t.distances = j.at("distances").is_null() ? std::nullopt : std::optional(j.at("distances").get<DistanceMatrix>());
  j.at("online_cpus").get_to(t.online_cpus);
  j.at("offline_cpus").get_to(t.offline_cpus);
  j.at("offline_nodes").get_to(t.offline_nodes);
  j.at("cpus_without_node").get_to(t.cpus_without_node);
  j.at("allowed_cpus").get_to(t.allowed_cpus);
  j.at("allowed_mems").get_to(t.allowed_mems);
}

void to_json(nlohmann::json& j, const CgroupPlacement& c) {
  j = {{"version", c.version},
       {"path", c.path},
       {"cpus", c.cpus ? nlohmann::json(*c.cpus) : nlohmann::json()},
       {"mems", c.mems ? nlohmann::json(*c.mems) : nlohmann::json()},
       {"cpu_limit", c.cpu_limit ? nlohmann::json(*c.cpu_limit) : nlohmann::json()}};
}

void to_json(nlohmann::json& j, const Placement& p) {
  j = {{"affinity", p.affinity},
       {"mems_allowed", p.mems_allowed},
       {"cgroup", p.cgroup ? nlohmann::json(*p.cgroup) : nlohmann::json()},
       {"cpus", p.cpus()},
       {"mems", p.mems()}};
}

}  // namespace numaserve
