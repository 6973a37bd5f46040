#pragma once
// The machine's NUMA layout as plain values, discovered from one of four
// sources behind one call. Discovery is pure: it reads and returns, it never
// binds threads or memory and never writes.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/cpu_set.h"
#include "numaserve/common/result.h"

namespace numaserve {

struct TopologySource {
  enum class Kind {
    kLive,       // this machine, through hwloc's native backends
    kXml,        // an hwloc XML export (format 2.x)
    kSysfs,      // a captured or mounted /sys + /proc tree, e.g. /host in a pod
    kSynthetic,  // an hwloc synthetic description, "pack:2 numa:1 core:4 pu:2"
  };
  Kind kind = Kind::kLive;
  std::string value;  // path (xml, sysfs) or description (synthetic)

  static TopologySource live() { return {Kind::kLive, {}}; }
  static TopologySource xml(std::string path) { return {Kind::kXml, std::move(path)}; }
  static TopologySource sysfs(std::string root) { return {Kind::kSysfs, std::move(root)}; }
  static TopologySource synthetic(std::string desc) { return {Kind::kSynthetic, std::move(desc)}; }

  std::string describe() const;
};

struct NumaNode {
  unsigned os_index = 0;
  // CPUs whose home node this is (the kernel's node<N>/cpulist, online only);
  // empty for a memory-only node (HBM, NVM, CXL expanders).
  CpuSet cpus;
  // CPUs closest to this node's memory: equal to `cpus` for an ordinary node,
  // the CPUs of the nearest ordinary node(s) for a memory-only one.
  CpuSet local_cpus;
  // Physical cores of `cpus`, each as its SMT sibling set, ordered by first CPU.
  std::vector<CpuSet> cores;
  std::uint64_t memory_bytes = 0;
  // Hugepage size in bytes -> pages configured on this node.
  std::map<std::uint64_t, std::uint64_t> hugepages;
  std::string kind;  // hwloc's memory tier subtype ("DRAM", "HBM", "NVM", "MCDRAM"), may be empty

  bool memory_only() const { return cpus.empty(); }
  // Memory for ordinary pages: the hugepage pools are resources of their own.
  std::uint64_t ordinary_memory() const;
};

struct Package {
  unsigned os_index = 0;
  CpuSet cpus;
  NodeSet nodes;  // NUMA nodes whose local CPUs lie in this package
};

// The SLIT distance matrix (10 = local). Rows and columns follow `nodes`.
struct DistanceMatrix {
  std::vector<unsigned> nodes;
  std::vector<std::uint32_t> values;  // row-major, nodes.size()^2

  std::optional<std::uint32_t> at(unsigned from_node, unsigned to_node) const;
};

struct Topology {
  std::string source;  // TopologySource::describe() of where it came from
  std::vector<Package> packages;  // ordered by os_index
  std::vector<NumaNode> nodes;    // ordered by os_index; ids may be sparse
  std::optional<DistanceMatrix> distances;

  CpuSet online_cpus;
  // Known to the machine but offline. From an XML exported by a restricted
  // process, resources hidden by its cpuset also show up here.
  CpuSet offline_cpus;
  NodeSet offline_nodes;  // with sysfs: the kernel's node/possible minus node/online
  // Online CPUs that no NUMA node claims (a node can be offline while its
  // CPUs stay online); they have no local memory and are best avoided.
  CpuSet cpus_without_node;
  // What the reading process's cpuset allows (cgroup / affinity at discovery
  // time). The rest of the model is the whole machine regardless.
  CpuSet allowed_cpus;
  NodeSet allowed_mems;

  const NumaNode* node(unsigned os_index) const;
  NodeSet node_ids() const;
  NodeSet nodes_with_cpus() const;
  std::size_t core_count() const;
  // Hardware threads per core; 1 without SMT. The maximum over cores, so
  // a machine with some siblings offline still reports SMT.
  unsigned threads_per_core() const;
};

// One call, four sources. Errors name the source (file, directory, string).
Result<Topology> discover_topology(const TopologySource& source);

}  // namespace numaserve
