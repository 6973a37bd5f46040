#include "numaserve/common/topology.h"

#include <fcntl.h>
#include <hwloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>

#include "numaserve/common/text_file.h"
#include "numaserve/common/topology_json.h"

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

}  // namespace

std::string TopologySource::describe() const {
  switch (kind) {
    case Kind::kLive: return "live system";
    case Kind::kXml: return "hwloc XML " + value;
    case Kind::kSysfs: return "sysfs root " + value;
    case Kind::kSynthetic: return "synthetic '" + value + "'";
  }
  return "unknown source";
}

std::optional<std::uint32_t> DistanceMatrix::at(unsigned from_node, unsigned to_node) const {
  const auto from = std::find(nodes.begin(), nodes.end(), from_node);
  const auto to = std::find(nodes.begin(), nodes.end(), to_node);
  if (from == nodes.end() || to == nodes.end()) return std::nullopt;
  return values[static_cast<std::size_t>(from - nodes.begin()) * nodes.size() +
                static_cast<std::size_t>(to - nodes.begin())];
}

const NumaNode* Topology::node(unsigned os_index) const {
  auto it = std::find_if(nodes.begin(), nodes.end(),
                         [&](const NumaNode& n) { return n.os_index == os_index; });
  return it == nodes.end() ? nullptr : &*it;
}

NodeSet Topology::node_ids() const {
  NodeSet out;
  for (const auto& n : nodes) out.insert(n.os_index);
  return out;
}

NodeSet Topology::nodes_with_cpus() const {
  NodeSet out;
  for (const auto& n : nodes) {
    if (!n.memory_only()) out.insert(n.os_index);
  }
  return out;
}

std::uint64_t NumaNode::ordinary_memory() const {
  std::uint64_t pools = 0;
  for (const auto& [size, count] : hugepages) pools += size * count;
  return memory_bytes - std::min(memory_bytes, pools);
}

std::size_t Topology::core_count() const {
  std::size_t n = 0;
  for (const auto& node : nodes) n += node.cores.size();
  return n;
}

unsigned Topology::threads_per_core() const {
  std::size_t most = 1;
  for (const auto& node : nodes) {
    for (const auto& core : node.cores) most = std::max(most, core.count());
  }
  return static_cast<unsigned>(most);
}

namespace {

// The first os_index that a sorted list of nodes or packages repeats.
template <typename Object>
std::optional<unsigned> first_repeated(const std::vector<Object>& sorted) {
  const auto at = std::adjacent_find(sorted.begin(), sorted.end(),
                                     [](const Object& a, const Object& b) { return a.os_index == b.os_index; });
  if (at == sorted.end()) return std::nullopt;
  return at->os_index;
}

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
    node.local_cpus = to_cpu_set(obj->cpuset) & out.online_cpus;
    node.memory_bytes = obj->attr->numanode.local_memory;
    // page_types is sorted by size and starts with the base page size.
    for (unsigned i = 1; i < obj->attr->numanode.page_types_len; ++i) {
      const auto& pt = obj->attr->numanode.page_types[i];
      node.hugepages[pt.size] = pt.count;
    }
    if (obj->subtype != nullptr) node.kind = obj->subtype;
    out.nodes.push_back(std::move(node));
  }
  assign_home_cpus(topo, sysfs_root_of(source), out.online_cpus, out.nodes);
  std::sort(out.nodes.begin(), out.nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });

  CpuSet claimed;
  const auto cores = discover_cores(topo, out.online_cpus);
  for (auto& node : out.nodes) {
    claimed |= node.cpus;
    for (const auto& core : cores) {
      if (core.intersects(node.cpus)) node.cores.push_back(core & node.cpus);
    }
  }
  out.cpus_without_node = out.online_cpus - claimed;

  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj));) {
    Package pkg;
    pkg.os_index = obj->os_index;
    pkg.cpus = to_cpu_set(obj->cpuset) & out.online_cpus;
    for (const auto& node : out.nodes) {
      if (node.local_cpus.intersects(pkg.cpus)) pkg.nodes.insert(node.os_index);
    }
    out.packages.push_back(std::move(pkg));
  }
  std::sort(out.packages.begin(), out.packages.end(),
            [](const Package& a, const Package& b) { return a.os_index < b.os_index; });
  // The kernel numbers its nodes and packages uniquely, and everything
  // downstream is keyed by those numbers; only an edited or damaged XML
  // file repeats one, and hwloc takes it as it is (fuzz_hwloc_xml).
  if (auto repeated = first_repeated(out.nodes)) {
    return make_error(Error::Code::kInvalidArgument,
                      source.describe() + ": NUMA node " + std::to_string(*repeated) + " appears twice", source.value);
  }
  if (auto repeated = first_repeated(out.packages)) {
    return make_error(Error::Code::kInvalidArgument,
                      source.describe() + ": package " + std::to_string(*repeated) + " appears twice", source.value);
  }
  out.distances = discover_distances(topo);
  if (const auto root = sysfs_root_of(source)) out.offline_nodes |= discover_offline_nodes(*root);
  return out;
}

#ifdef NUMASERVE_FUZZ_BUILD
// The bounds the linker gives the section of libFuzzer's inline 8-bit
// coverage counters (-fsanitize=fuzzer-no-link builds only).
extern "C" std::uint8_t __start___sancov_cntrs[];
extern "C" std::uint8_t __stop___sancov_cntrs[];

// In a fuzz build the child's edges — discover_with_hwloc and its helpers,
// some 600 of them — are counted in the child's copy of the counters, which
// libFuzzer never reads: measured, fuzz_hwloc_xml saw 0 of
// discover_with_hwloc's 300 edges and stayed at 1,111 through 3,000 runs,
// exploring blind. The child copies its counters into a page shared with
// the parent, which keeps the larger of each pair, as AFL's fork server
// shares its coverage map.
class ChildCoverage {
 public:
  ChildCoverage() : size_(static_cast<std::size_t>(__stop___sancov_cntrs - __start___sancov_cntrs)) {
    void* shared = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED) shared_ = static_cast<std::uint8_t*>(shared);
  }
  ~ChildCoverage() {
    if (shared_ != nullptr) ::munmap(shared_, size_);
  }
  ChildCoverage(const ChildCoverage&) = delete;
  ChildCoverage& operator=(const ChildCoverage&) = delete;
  void send() const {  // in the child, before it exits
    if (shared_ != nullptr) std::memcpy(shared_, __start___sancov_cntrs, size_);
  }
  void take() const {  // in the parent, once the child is gone
    if (shared_ == nullptr) return;
    for (std::size_t i = 0; i < size_; ++i) __start___sancov_cntrs[i] = std::max(__start___sancov_cntrs[i], shared_[i]);
  }

 private:
  std::size_t size_;
  std::uint8_t* shared_ = nullptr;
};
#else
struct ChildCoverage {
  void send() const {}
  void take() const {}
};
#endif

// hwloc 2.9's XML import (its own parser; Debian's libxml2 plugin is not
// installed) trusts what it reads (fuzz_hwloc_xml): a truncated file
// ("<topology version=") or an object without one of its sets dereferences
// NULL inside hwloc_topology_load; a PU without an os_index counts as
// number 2^32 - 1, half a GiB of set and seconds of memset; a file hwloc
// refuses leaks what it had read. An XML file comes from an operator or a
// capture, not from the kernel, so its whole discovery runs in a child with
// 1 s and 256 MiB, which sends the model back as JSON: a file that crashes,
// hangs or bloats hwloc is an error naming it, and this process never runs
// hwloc on it. The fork and the JSON round trip cost a few milliseconds,
// once per file.
Result<Topology> discover_in_child(const TopologySource& source) {
  constexpr unsigned kSeconds = 1;                  // an export of thousands of CPUs loads in milliseconds
  constexpr std::uint64_t kHeadroom = 256u << 20;  // real exports need a few MiB
  const std::string& file = source.value;
  const ChildCoverage coverage;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return make_error(Error::Code::kInternal, "pipe to read " + file + " failed", file);
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return make_error(Error::Code::kInternal, "fork to read " + file + " failed", file);
  }
  if (child == 0) {
    ::close(pipe_fds[0]);
    // Die of the signal itself: a sanitizer's or fuzzer's handler would
    // report the parent's input as its own finding.
    for (const int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGALRM}) std::signal(sig, SIG_DFL);
    ::alarm(kSeconds);
    if (std::ifstream statm("/proc/self/statm"); statm) {
      std::uint64_t pages = 0;
      statm >> pages;
      const std::uint64_t cap = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + kHeadroom;
      const rlimit limit{cap, cap};
      ::setrlimit(RLIMIT_AS, &limit);
    }
    const auto found = discover_with_hwloc(source);
    const nlohmann::json reply =
        found ? nlohmann::json{{"topology", *found}}
              : nlohmann::json{{"code", static_cast<int>(found.error().code)},
                               {"error", found.error().message},
                               {"field", found.error().field}};
    const std::string text = reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    for (std::size_t sent = 0; sent < text.size();) {
      const ssize_t n = ::write(pipe_fds[1], text.data() + sent, text.size() - sent);
      if (n < 0 && errno != EINTR) ::_exit(1);
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    coverage.send();
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string text;
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], chunk, sizeof chunk);
    if (n > 0) text.append(chunk, static_cast<std::size_t>(n));
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return make_error(Error::Code::kInternal, "waiting for the reading of " + file + " failed", file);
  }
  coverage.take();
  if (WIFSIGNALED(status)) {
    return make_error(Error::Code::kInvalidArgument,
                      WTERMSIG(status) == SIGALRM
                          ? "hwloc did not finish reading " + file + " within " + std::to_string(kSeconds) + " s"
                          : "hwloc crashed reading " + file + " (signal " + std::to_string(WTERMSIG(status)) +
                                "): not a well-formed hwloc XML export",
                      file);
  }
  const auto reply = nlohmann::json::parse(text, nullptr, false);
  if (WEXITSTATUS(status) != 0 || reply.is_discarded()) {
    return make_error(Error::Code::kInvalidArgument,
                      "hwloc could not read " + file + " within " + std::to_string(kHeadroom >> 20) + " MiB", file);
  }
  try {
    if (reply.contains("error")) {
      return tl::unexpected(Error{static_cast<Error::Code>(reply.at("code").get<int>()),
                                  reply.at("error").get<std::string>(), reply.at("field").get<std::string>()});
    }
    return reply.at("topology").get<Topology>();
  } catch (const std::exception& e) {
    return make_error(Error::Code::kInternal, "the model read from " + file + " did not come back whole: " + e.what(),
                      file);
  }
}

}  // namespace

Result<Topology> discover_topology(const TopologySource& source) {
  if (source.kind == TopologySource::Kind::kXml) return discover_in_child(source);
  return discover_with_hwloc(source);
}

}  // namespace numaserve
