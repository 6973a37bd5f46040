#include "report/report.h"

#include <cstdio>
#include <ostream>
#include <sstream>

namespace numaserve::agent::report {
namespace {

std::string or_none(const CpuSet& set) { return set.empty() ? "none" : set.to_list(); }

std::string describe_node(const NumaNode& node) {
  std::ostringstream out;
  out << "NUMA node " << node.os_index;
  if (!node.kind.empty()) out << " (" << node.kind << ")";
  out << ": ";
  if (node.memory_only()) {
    out << "memory only, local to CPUs " << or_none(node.local_cpus);
  } else {
    out << "CPUs " << node.cpus.to_list() << " (" << node.cores.size() << " cores)";
  }
  out << ", " << format_bytes(node.memory_bytes);
  for (const auto& [size, count] : node.hugepages) {
    if (count > 0) out << ", " << count << " x " << format_bytes(size) << " hugepages";
  }
  return out.str();
}

// The machine: its totals, what is offline or allowed, packages, nodes.
void write_machine(std::ostream& out, const Topology& t) {
  out << "Machine (" << t.source << "): " << t.packages.size() << " packages, " << t.nodes.size()
      << " NUMA nodes (" << t.nodes_with_cpus().count() << " with CPUs), " << t.core_count()
      << " cores, " << t.online_cpus.count() << " online CPUs, " << t.threads_per_core()
      << " thread(s) per core\n";
  if (!t.offline_cpus.empty()) out << "  offline CPUs: " << t.offline_cpus.to_list() << "\n";
  if (!t.offline_nodes.empty()) out << "  offline NUMA nodes: " << t.offline_nodes.to_list() << "\n";
  if (!t.cpus_without_node.empty()) {
    out << "  CPUs without a NUMA node: " << t.cpus_without_node.to_list() << "\n";
  }
  out << "  allowed here: CPUs " << or_none(t.allowed_cpus) << ", NUMA nodes " << or_none(t.allowed_mems)
      << "\n";
  for (const auto& pkg : t.packages) {
    out << "Package " << pkg.os_index << ": CPUs " << or_none(pkg.cpus) << ", NUMA nodes "
        << or_none(pkg.nodes) << "\n";
  }
  for (const auto& node : t.nodes) out << "  " << describe_node(node) << "\n";
}

// The SLIT as a table, right-aligned in columns of five.
void write_distances(std::ostream& out, const DistanceMatrix& distances) {
  out << "Distances (SLIT, 10 = local):\n      ";
  for (unsigned to : distances.nodes) out << std::string(5 - std::to_string(to).size(), ' ') << to;
  out << "\n";
  for (unsigned from : distances.nodes) {
    out << std::string(6 - std::to_string(from).size(), ' ') << from;
    for (unsigned to : distances.nodes) {
      const auto d = std::to_string(distances.at(from, to).value_or(0));
      out << std::string(5 - std::min<std::size_t>(d.size(), 4), ' ') << d;
    }
    out << "\n";
  }
}

// Where this process may run and allocate, and why (affinity, cgroup).
void write_placement(std::ostream& out, const Placement& placement) {
  out << "This process: CPUs " << or_none(placement.cpus()) << ", memory nodes "
      << or_none(placement.mems()) << " (affinity " << or_none(placement.affinity)
      << ", Mems_allowed " << or_none(placement.mems_allowed);
  if (const auto& cg = placement.cgroup) {
    out << "; cgroup v" << cg->version << " " << cg->path;
    if (cg->cpus) out << " cpus " << or_none(*cg->cpus);
    if (cg->mems) out << " mems " << or_none(*cg->mems);
    out << ", CPU limit ";
    if (cg->cpu_limit) {
      out << *cg->cpu_limit;
    } else {
      out << "none";
    }
  }
  out << ")\n";
}

void write_kernel(std::ostream& out, const KernelSettings& k) {
  out << "Kernel: numa_balancing "
      << (k.numa_balancing ? std::to_string(*k.numa_balancing) : std::string("absent"))
      << ", transparent hugepages " << (k.transparent_hugepage.empty() ? "absent" : k.transparent_hugepage)
      << ", isolated CPUs " << or_none(k.isolated_cpus) << ", nohz_full CPUs " << or_none(k.nohz_full_cpus)
      << "\n";
}

// What the pods hold on each node: exclusive CPUs, memory, and whose.
void write_allocations(std::ostream& out, const Topology& t, const kubelet::Allocations& a) {
  out << "Held by pods (" << a.source << (a.stale ? ", stale" : "") << "):\n";
  for (const auto& node : t.nodes) {
    out << "  NUMA node " << node.os_index << ": exclusive CPUs " << or_none(a.exclusive_cpus & node.cpus);
    if (const auto it = a.assigned.find(node.os_index); it != a.assigned.end()) {
      for (const auto& [resource, bytes] : it->second) out << ", " << resource << " " << format_bytes(bytes);
    }
    out << "\n";
    for (const auto& pod : a.pods) {
      for (const auto& container : pod.containers) {
        const CpuSet cpus = container.cpus & node.cpus;
        if (!cpus.empty()) {
          out << "    " << pod.pod_namespace << "/" << pod.name << " (" << container.name << "): CPUs "
              << cpus.to_list() << "\n";
        }
      }
    }
  }
}

}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (value == static_cast<double>(static_cast<std::uint64_t>(value))) {
    std::snprintf(buf, sizeof buf, "%.0f %s", value, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

std::string render_text(const discover::NodeReport& report) {
  const Topology& t = report.topology;
  std::ostringstream out;
  write_machine(out, t);
  if (t.distances) write_distances(out, *t.distances);
  if (report.placement) write_placement(out, *report.placement);
  if (report.kernel) write_kernel(out, *report.kernel);
  if (report.allocations) write_allocations(out, t, *report.allocations);
  for (const auto& w : report.warnings) out << "warning: " << w << "\n";
  return out.str();
}

}  // namespace numaserve::agent::report
