#pragma once
// The fleet as the cluster sees it, Node and NodeResourceTopology objects as
// the agents publish them, grouped into machine classes and sized: one
// replica size per class (per-class) or one for the whole fleet (uniform).
// Pure: `numaserve-topology-agent cluster-plan` reads the objects from files,
// the agent computes its own node's class with the same machine_class().

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "numaserve/common/names.h"
#include "numaserve/common/result.h"

namespace numaserve::kube::fleet {

// The node labels: the agent writes them (publish/nrt.cpp), the fleet and
// the operator read them. One place for each key.
namespace label {
inline constexpr const char* kNumaNodes = "numaserve.io/numa-nodes";
inline constexpr const char* kMemoryOnlyNumaNodes = "numaserve.io/memory-only-numa-nodes";
inline constexpr const char* kCpusPerNumaNode = "numaserve.io/cpus-per-numa-node";
inline constexpr const char* kSmt = "numaserve.io/smt";
inline constexpr const char* kThreadsPerCore = "numaserve.io/threads-per-core";
inline constexpr const char* kMachineClass = "numaserve.io/machine-class";
inline constexpr const char* kReplicaCpus = "numaserve.io/replica-cpus";
inline constexpr const char* kReplicaMemory = "numaserve.io/replica-memory";
inline constexpr const char* kReplicas = "numaserve.io/replicas";
}  // namespace label

// A NUMA zone that has CPUs, by what the kubelet allocates in it (not what
// is available: running pods do not change a machine's class).
struct Zone {
  std::string name;
  unsigned cpus = 0;
  std::uint64_t memory_bytes = 0;
  std::map<std::string, std::uint64_t> hugepages;  // "hugepages-2Mi" -> bytes
};

// What decides a replica's shape on a machine.
struct Shape {
  std::vector<Zone> zones;  // those with CPUs, by name
  unsigned threads_per_core = 1;
  std::string policy;  // the Topology Manager's, from the NRT's attributes ("" unknown)
  std::string scope;
};

// From a NodeResourceTopology object (the agent's JSON, or YAML read back
// with quantities as strings). Errors name the field.
Result<Shape> shape_of(const nlohmann::json& nrt, unsigned threads_per_core);

// "mc-" and 10 hex digits of a hash of everything in the shape: equal
// shapes, equal classes, on every machine and in every plan.
std::string machine_class(const Shape& shape);

// One node of the fleet as the API server returns it.
struct FleetNode {
  std::string name;
  std::map<std::string, std::string> labels;
  // Its NodeResourceTopology's shape, if one exists; threads_per_core is
  // the labels' (plan_fleet sets it: a Node may come from another file).
  std::optional<Shape> shape;
};

// Node and NodeResourceTopology objects from `kubectl get ... -o yaml` (a
// v1 List) or multi-document YAML, in `source` (named in errors, with the
// object and field). Other kinds are errors; nodes come in file order.
Result<std::vector<FleetNode>> read_objects(std::string_view text, const std::string& source);
// Several sources: a node's NRT may come from another file than its Node.
std::vector<FleetNode> merge(std::vector<std::vector<FleetNode>> sources);

enum class Sizing { kPerClass, kUniform };
// As --sizing and a ServingPool's spec.sizing write them.
inline constexpr auto kSizingNames = make_names<Sizing>({{Sizing::kPerClass, "per-class"}, {Sizing::kUniform, "uniform"}});
Result<Sizing> parse_sizing(std::string_view text);
std::string_view to_string(Sizing sizing);

struct FleetConfig {
  Sizing sizing = Sizing::kPerClass;
  unsigned replicas_per_numa_node = 1;  // per-class
  double pod_memory_fraction = 0.9;
  double uniform_min_use = 0.9;  // of the planned nodes' allocatable CPUs
  // Hugepages each replica asks ("hugepages-2Mi" -> bytes): a zone holds
  // only as many replicas as its allocatable hugepages of each size cover.
  std::map<std::string, std::uint64_t> hugepages_per_replica{};
};
// "hugepages-2Mi=1Gi,hugepages-1Gi=2Gi" (empty: none), as --hugepages-per-replica takes it.
Result<std::map<std::string, std::uint64_t>> parse_hugepages(std::string_view text);

struct ClassPlan {
  std::string name;  // machine_class()
  Shape shape;
  std::vector<std::string> nodes;
  unsigned replicas_per_machine = 0;
  unsigned cpus = 0;  // a replica's
  std::uint64_t memory_bytes = 0;
  std::map<std::string, std::uint64_t> hugepages;  // a replica's, as asked
  std::uint64_t replicas() const { return std::uint64_t{replicas_per_machine} * nodes.size(); }
  std::uint64_t cpus_used() const { return cpus * replicas(); }
  std::uint64_t cpus_allocatable() const;
};

struct Unplanned {
  std::string node;
  std::string reason;
};

struct FleetPlan {
  Sizing sizing = Sizing::kPerClass;
  std::vector<ClassPlan> classes;  // by name
  std::vector<Unplanned> unplanned;
  std::vector<std::string> notes;
  std::uint64_t cpus_used() const;
  std::uint64_t cpus_allocatable() const;
  // The share of the planned CPUs one Service can put to work: kube-proxy
  // gives every replica the same share of requests, so the smallest replica
  // saturates first, when the fleet serves its CPUs x the replica count.
  // 1 with one replica size.
  double equal_split_share() const;
  // The smallest replica's CPUs.
  unsigned smallest_replica_cpus() const;
};

// Errors only when no node can be planned; the error lists every node's reason.
Result<FleetPlan> plan_fleet(const std::vector<FleetNode>& nodes, const FleetConfig& config);

void to_json(nlohmann::json& j, const FleetPlan& plan);
std::string render_text(const FleetPlan& plan);
// Values for charts/numaserve, taken as they are: `classes:`, one Deployment
// (nodes, replicas per node, Guaranteed resources) per machine class.
nlohmann::json helm_values(const FleetPlan& plan);

}  // namespace numaserve::kube::fleet
