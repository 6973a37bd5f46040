// Discovery through hwloc, in this process: load a source, then read its
// NUMA nodes, cores, packages and distances into the machine model.
#include <hwloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>

#include "numaserve/common/text_file.h"
#include "topology_discovery.h"

namespace numaserve {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

CpuSet to_cpu_set(hwloc_const_bitmap_t bitmap) {
  CpuSet out;
  if (bitmap == nullptr) return out;
  for (int i = hwloc_bitmap_first(bitmap); i >= 0 && static_cast<unsigned>(i) <= CpuSet::kMaxId;
       i = hwloc_bitmap_next(bitmap, i)) {
    out.insert(static_cast<unsigned>(i));
  }
  return out;
}

// hwloc's Linux backend takes its sysfs root only from the environment
// (HWLOC_FSROOT), read during hwloc_topology_load(). The variable is process
// global, so loads from a root are serialized and the old value restored.
class ScopedFsRoot {
 public:
  explicit ScopedFsRoot(const std::string& root) : lock_(mutex()) {
    if (const char* old = std::getenv("HWLOC_FSROOT")) old_ = old;
    ::setenv("HWLOC_FSROOT", root.c_str(), 1);
  }
  ~ScopedFsRoot() {
    if (old_) {
      ::setenv("HWLOC_FSROOT", old_->c_str(), 1);
    } else {
      ::unsetenv("HWLOC_FSROOT");
    }
  }
  ScopedFsRoot(const ScopedFsRoot&) = delete;
  ScopedFsRoot& operator=(const ScopedFsRoot&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  std::lock_guard<std::mutex> lock_;
  std::optional<std::string> old_;
};

Result<TopologyPtr> load_hwloc(const TopologySource& source) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    return make_error(Error::Code::kInternal, "hwloc_topology_init failed");
  }
  TopologyPtr topo(raw);
  // The whole machine, not only what our own cpuset allows: the agent runs
  // in a pod restricted to a few CPUs yet must describe every node. What is
  // allowed is recorded separately (Topology::allowed_cpus).
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);

  std::optional<ScopedFsRoot> fsroot;
  switch (source.kind) {
    case TopologySource::Kind::kLive:
      break;
    case TopologySource::Kind::kXml: {
      auto readable = read_text_file(source.value);
      if (!readable) return tl::unexpected(std::move(readable.error()).with_context("hwloc XML"));
      if (hwloc_topology_set_xml(raw, source.value.c_str()) != 0) {
        return make_error(Error::Code::kInvalidArgument,
                          "cannot use " + source.value + " as an hwloc XML topology", source.value);
      }
      break;
    }
    case TopologySource::Kind::kSysfs: {
      std::error_code ec;
      if (!std::filesystem::is_directory(std::filesystem::path(source.value) / "sys/devices/system",
                                         ec)) {
        return make_error(Error::Code::kNotFound,
                          "sysfs root " + source.value + " has no sys/devices/system directory",
                          source.value);
      }
      // The x86 CPUID backend would describe the CPU we run on, not the
      // captured machine.
      hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
      fsroot.emplace(source.value);
      break;
    }
    case TopologySource::Kind::kSynthetic:
      if (hwloc_topology_set_synthetic(raw, source.value.c_str()) != 0) {
        return make_error(Error::Code::kInvalidArgument,
                          "bad synthetic topology '" + source.value + "'", source.value);
      }
      break;
  }
  if (hwloc_topology_load(raw) != 0) {
    const char* hint = source.kind == TopologySource::Kind::kXml ? " (not an hwloc XML topology of format 2.x?)" : "";
    return make_error(Error::Code::kInvalidArgument, "hwloc could not load " + source.describe() + hint,
                      source.value);
  }
  return topo;
}

// Where the kernel's node<N>/cpulist can be read, if anywhere.
std::optional<std::filesystem::path> sysfs_root_of(const TopologySource& source) {
  switch (source.kind) {
    case TopologySource::Kind::kLive: return std::filesystem::path("/");
    case TopologySource::Kind::kSysfs: return std::filesystem::path(source.value);
    default: return std::nullopt;
  }
}

// hwloc gives a memory-only node the CPUs of its locality (the parent's
// cpuset), so it alone cannot tell which node a CPU calls home. The kernel
// can: node<N>/cpulist. Without sysfs (XML, synthetic), the lowest-numbered
// node under each parent is taken as the CPUs' home, as firmware numbers
// CPU-bearing proximity domains first.
void assign_home_cpus(hwloc_topology_t topo, const std::optional<std::filesystem::path>& root,
                      const CpuSet& online, std::vector<NumaNode>& nodes) {
  if (root) {
    bool all_read = true;
    std::vector<CpuSet> from_sysfs;
    for (const auto& node : nodes) {
      const auto path = under_root(*root, "/sys/devices/system/node/node" +
                                              std::to_string(node.os_index) + "/cpulist");
      auto text = read_text_file(path);
      auto cpus = text ? CpuSet::parse_list(*text) : Result<CpuSet>(tl::unexpected(text.error()));
      if (!cpus) {
        all_read = false;
        break;
      }
      from_sysfs.push_back(*cpus & online);
    }
    if (all_read) {
      for (std::size_t i = 0; i < nodes.size(); ++i) nodes[i].cpus = from_sysfs[i];
      return;
    }
  }
  std::map<hwloc_obj_t, unsigned> home_of_parent;
  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, obj));) {
    auto [it, inserted] = home_of_parent.emplace(obj->parent, obj->os_index);
    if (!inserted) it->second = std::min(it->second, obj->os_index);
  }
  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, obj));) {
    auto node = std::find_if(nodes.begin(), nodes.end(),
                             [&](const NumaNode& n) { return n.os_index == obj->os_index; });
    if (home_of_parent[obj->parent] == obj->os_index) node->cpus = node->local_cpus;
  }
}

// Physical cores as SMT sibling sets. Topologies without Core objects
// (some synthetic ones) get one core per PU.
std::vector<CpuSet> discover_cores(hwloc_topology_t topo, const CpuSet& online) {
  std::vector<CpuSet> cores;
  CpuSet covered;
  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, obj));) {
    CpuSet pus = to_cpu_set(obj->cpuset) & online;
    if (pus.empty()) continue;
    covered |= pus;
    cores.push_back(std::move(pus));
  }
  for (unsigned cpu : (online - covered).ids()) cores.push_back(CpuSet{cpu});
  std::sort(cores.begin(), cores.end(),
            [](const CpuSet& a, const CpuSet& b) { return a.first() < b.first(); });
  return cores;
}

// Nodes the kernel could bring online but has not (node/possible minus
// node/online): an offline node's CPUs can still be online, unattached.
// hwloc only knows nodes it once saw, so this adds what the kernel knows.
NodeSet discover_offline_nodes(const std::filesystem::path& root) {
  auto possible = read_text_file(under_root(root, "/sys/devices/system/node/possible"));
  auto online = read_text_file(under_root(root, "/sys/devices/system/node/online"));
  if (!possible || !online) return {};
  auto possible_set = CpuSet::parse_list(*possible);
  auto online_set = CpuSet::parse_list(*online);
  if (!possible_set || !online_set) return {};
  return *possible_set - *online_set;
}

std::optional<DistanceMatrix> discover_distances(hwloc_topology_t topo) {
  unsigned count = 0;
  const unsigned long kind = HWLOC_DISTANCES_KIND_MEANS_LATENCY;
  if (hwloc_distances_get_by_type(topo, HWLOC_OBJ_NUMANODE, &count, nullptr, kind, 0) != 0 ||
      count == 0) {
    return std::nullopt;
  }
  std::vector<hwloc_distances_s*> all(count, nullptr);
  if (hwloc_distances_get_by_type(topo, HWLOC_OBJ_NUMANODE, &count, all.data(), kind, 0) != 0) {
    return std::nullopt;
  }
  all.resize(count);
  // Several matrices can coexist (the OS's SLIT, user-provided, benchmarks);
  // the kernel's own is the one placement decisions are made against.
  auto chosen = std::find_if(all.begin(), all.end(), [&](hwloc_distances_s* d) {
    const char* name = hwloc_distances_get_name(topo, d);
    return name != nullptr && std::string_view(name) == "NUMALatency";
  });
  if (chosen == all.end()) {
    chosen = std::find_if(all.begin(), all.end(), [](hwloc_distances_s* d) {
      return (d->kind & HWLOC_DISTANCES_KIND_FROM_OS) != 0;
    });
  }
  if (chosen == all.end()) chosen = all.begin();

  const hwloc_distances_s* d = *chosen;
  std::vector<unsigned> order(d->nbobjs);
  for (unsigned i = 0; i < d->nbobjs; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](unsigned a, unsigned b) { return d->objs[a]->os_index < d->objs[b]->os_index; });
  DistanceMatrix matrix;
  for (unsigned i : order) matrix.nodes.push_back(d->objs[i]->os_index);
  for (unsigned i : order) {
    for (unsigned j : order) {
      matrix.values.push_back(static_cast<std::uint32_t>(d->values[i * d->nbobjs + j]));
    }
  }
  for (auto* each : all) hwloc_distances_release(topo, each);
  return matrix;
}


// The first os_index that a sorted list of nodes or packages repeats.
template <typename Object>
std::optional<unsigned> first_repeated(const std::vector<Object>& sorted) {
  const auto at = std::adjacent_find(sorted.begin(), sorted.end(),
                                     [](const Object& a, const Object& b) { return a.os_index == b.os_index; });
  if (at == sorted.end()) return std::nullopt;
  return at->os_index;
}

// The NUMA nodes by number, with their memory, hugepage pools, kind and
// home CPUs.
Result<std::vector<NumaNode>> discover_nodes(hwloc_topology_t topo, const TopologySource& source,
                                             const CpuSet& online) {
  std::vector<NumaNode> nodes;
  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, obj));) {
    // Node numbers go into node sets; an XML file may say any number, or
    // none (hwloc's unknown index, 2^32 - 1), which would size a set in GiB.
    if (obj->os_index > CpuSet::kMaxId) {
      return make_error(Error::Code::kInvalidArgument,
                        source.describe() + ": a NUMA node numbered " + std::to_string(obj->os_index) + ", above " +
                            std::to_string(CpuSet::kMaxId),
                        source.value);
    }
    NumaNode node;
    node.os_index = obj->os_index;
    node.local_cpus = to_cpu_set(obj->cpuset) & online;
    node.memory_bytes = obj->attr->numanode.local_memory;
    // page_types is sorted by size and starts with the base page size.
    for (unsigned i = 1; i < obj->attr->numanode.page_types_len; ++i) {
      const auto& pt = obj->attr->numanode.page_types[i];
      node.hugepages[pt.size] = pt.count;
    }
    if (obj->subtype != nullptr) node.kind = obj->subtype;
    nodes.push_back(std::move(node));
  }
  assign_home_cpus(topo, sysfs_root_of(source), online, nodes);
  std::sort(nodes.begin(), nodes.end(), [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  return nodes;
}

// Each node's cores, cut to its CPUs; returns the CPUs some node claims.
CpuSet attach_cores(hwloc_topology_t topo, const CpuSet& online, std::vector<NumaNode>& nodes) {
  CpuSet claimed;
  const auto cores = discover_cores(topo, online);
  for (auto& node : nodes) {
    claimed |= node.cpus;
    for (const auto& core : cores) {
      if (core.intersects(node.cpus)) node.cores.push_back(core & node.cpus);
    }
  }
  return claimed;
}

// Packages by number, each with the nodes whose local CPUs it holds.
std::vector<Package> discover_packages(hwloc_topology_t topo, const CpuSet& online, const std::vector<NumaNode>& nodes) {
  std::vector<Package> packages;
  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj));) {
    Package pkg;
    pkg.os_index = obj->os_index;
    pkg.cpus = to_cpu_set(obj->cpuset) & online;
    for (const auto& node : nodes) {
      if (node.local_cpus.intersects(pkg.cpus)) pkg.nodes.insert(node.os_index);
    }
    packages.push_back(std::move(pkg));
  }
  std::sort(packages.begin(), packages.end(), [](const Package& a, const Package& b) { return a.os_index < b.os_index; });
  return packages;
}

// The kernel numbers its nodes and packages uniquely, and everything
// downstream is keyed by those numbers; only an edited or damaged XML
// file repeats one, and hwloc takes it as it is (fuzz_hwloc_xml).
Status check_unique(const Topology& t, const TopologySource& source) {
  if (auto repeated = first_repeated(t.nodes)) {
    return make_error(Error::Code::kInvalidArgument,
                      source.describe() + ": NUMA node " + std::to_string(*repeated) + " appears twice", source.value);
  }
  if (auto repeated = first_repeated(t.packages)) {
    return make_error(Error::Code::kInvalidArgument,
                      source.describe() + ": package " + std::to_string(*repeated) + " appears twice", source.value);
  }
  return {};
}

}  // namespace

Result<Topology> discover_with_hwloc(const TopologySource& source) {
  auto loaded = load_hwloc(source);
  if (!loaded) return tl::unexpected(loaded.error());
  hwloc_topology_t topo = loaded->get();

  Topology out;
  out.source = source.describe();
  out.online_cpus = to_cpu_set(hwloc_topology_get_topology_cpuset(topo));
  out.offline_cpus = to_cpu_set(hwloc_topology_get_complete_cpuset(topo)) - out.online_cpus;
  out.offline_nodes = to_cpu_set(hwloc_topology_get_complete_nodeset(topo)) -
                      to_cpu_set(hwloc_topology_get_topology_nodeset(topo));
  out.allowed_cpus = to_cpu_set(hwloc_topology_get_allowed_cpuset(topo)) & out.online_cpus;
  out.allowed_mems = to_cpu_set(hwloc_topology_get_allowed_nodeset(topo));
  auto nodes = discover_nodes(topo, source, out.online_cpus);
  if (!nodes) return tl::unexpected(nodes.error());
  out.nodes = std::move(*nodes);
  out.cpus_without_node = out.online_cpus - attach_cores(topo, out.online_cpus, out.nodes);
  out.packages = discover_packages(topo, out.online_cpus, out.nodes);
  if (auto unique = check_unique(out, source); !unique) return tl::unexpected(unique.error());
  out.distances = discover_distances(topo);
  if (const auto root = sysfs_root_of(source)) out.offline_nodes |= discover_offline_nodes(*root);
  return out;
}

}  // namespace numaserve
