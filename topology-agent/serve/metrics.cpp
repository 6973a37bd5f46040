#include "serve/metrics.h"

#include "numaserve/common/prometheus.h"
#include "plan/plan_output.h"

namespace numaserve::agent::serve {
namespace {

std::string node_label(unsigned node) { return prometheus::label("numa_node", std::to_string(node)); }

// The agent's own counters: cycles, failures by stage, retries.
void write_counters(prometheus::TextWriter& w, const updater::Counters& counters) {
  w.single("numaserve_agent_cycles_total", "counter", "Discover-plan-publish cycles run.", counters.cycles);
  w.family("numaserve_agent_failures_total", "counter", "Failed stages, by stage.");
  for (const char* stage : {"discover", "kubelet_files", "podresources", "plan", "publish", "apiserver"}) {
    const auto it = counters.failures.find(stage);
    w.sample("numaserve_agent_failures_total", it == counters.failures.end() ? 0 : it->second,
             prometheus::label("stage", stage));
  }
  w.single("numaserve_agent_apiserver_retries_total", "counter", "API server requests retried after a transient failure.",
           counters.apiserver_retries);
  w.single("numaserve_agent_apiserver_unchanged_total", "counter",
           "API server applies skipped because the object was already so.", counters.apiserver_unchanged);
  w.single("numaserve_agent_podresources_retries_total", "counter", "PodResources calls retried after a failure.",
           counters.podresources_retries);
  w.single("numaserve_agent_files_changed_total", "counter", "Hint files rewritten because their content changed.",
           counters.files_changed);
  w.single("numaserve_agent_last_success_timestamp_seconds", "gauge", "When the last cycle fully succeeded.",
           static_cast<std::uint64_t>(counters.last_success_unix_seconds));
}

// What the pods hold, per NUMA node.
void write_allocations(prometheus::TextWriter& w, const Topology& t, const kubelet::Allocations& a) {
  w.family("numaserve_node_exclusive_cpus", "gauge", "CPUs held exclusively by pods, per NUMA node.");
  for (const auto& node : t.nodes) {
    w.sample("numaserve_node_exclusive_cpus", (a.exclusive_cpus & node.cpus).count(), node_label(node.os_index));
  }
  w.single("numaserve_agent_allocations_stale", "gauge",
           "1 when the pods' allocations are the last good view, the latest PodResources query having failed.",
           a.stale ? 1 : 0);
}

// What discovery found: the machine, the kernel's NUMA setting, the pods.
void write_node(prometheus::TextWriter& w, const discover::NodeReport& report) {
  const Topology& t = report.topology;
  w.family("numaserve_node_numa_nodes", "gauge", "NUMA nodes, and how many have CPUs.")
      .sample("numaserve_node_numa_nodes", t.nodes.size(), "kind=\"all\"")
      .sample("numaserve_node_numa_nodes", t.nodes_with_cpus().count(), "kind=\"with_cpus\"");
  w.family("numaserve_node_cpus", "gauge", "Online CPUs per NUMA node.");
  for (const auto& node : t.nodes) w.sample("numaserve_node_cpus", node.cpus.count(), node_label(node.os_index));
  w.family("numaserve_node_memory_bytes", "gauge", "Memory per NUMA node.");
  for (const auto& node : t.nodes) {
    w.sample("numaserve_node_memory_bytes", node.memory_bytes, node_label(node.os_index));
  }
  w.single("numaserve_node_offline_cpus", "gauge", "CPUs present but offline.", t.offline_cpus.count());
  w.single("numaserve_node_threads_per_core", "gauge", "SMT threads per core.", t.threads_per_core());
  if (report.kernel && report.kernel->numa_balancing) {
    w.single("numaserve_node_numa_balancing", "gauge", "kernel.numa_balancing (0 is what pinned pods want).",
             *report.kernel->numa_balancing);
  }
  if (report.allocations) write_allocations(w, t, *report.allocations);
  w.single("numaserve_agent_warnings", "gauge", "Settings that work but hurt NUMA placement (see /topology).",
           report.warnings.size());
}

// What the plan reserves and how it sizes a replica.
void write_plan(prometheus::TextWriter& w, const plan::NodePlan& plan) {
  w.family("numaserve_plan_reserved_cpus", "gauge", "CPUs the plan reserves for the system, per NUMA node.");
  for (const auto& room : plan.nodes) {
    w.sample("numaserve_plan_reserved_cpus", room.reserved_cpus.count(), node_label(room.node));
  }
  w.family("numaserve_plan_reserved_memory_bytes", "gauge", "Memory the plan reserves, per NUMA node.");
  for (const auto& [node, bytes] : plan.kubelet.reserved_memory) {
    w.sample("numaserve_plan_reserved_memory_bytes", bytes, node_label(node));
  }
  w.single("numaserve_plan_replica_cpus", "gauge", "CPUs one replica requests.", plan.pod.cpus);
  w.single("numaserve_plan_replica_memory_bytes", "gauge", "Memory one replica requests.", plan.pod.memory_bytes);
  w.single("numaserve_plan_replicas", "gauge", "Replicas that fit this machine, one NUMA node each.",
           plan.pod.replicas_per_machine);
}

}  // namespace

std::string render_metrics(const updater::CycleResult& last, const updater::Counters& counters) {
  std::string out;
  prometheus::TextWriter w(out);
  write_counters(w, counters);
  if (last.report) write_node(w, *last.report);
  if (last.plan) write_plan(w, *last.plan);
  return out;
}

kube::http::Snapshot snapshot_of(const updater::CycleResult& last, const updater::Counters& counters) {
  kube::http::Snapshot snapshot;
  if (last.report) snapshot.topology_json = nlohmann::json(*last.report).dump(2) + "\n";
  if (last.plan) snapshot.plan_json = nlohmann::json(*last.plan).dump(2) + "\n";
  snapshot.metrics = render_metrics(last, counters);
  if (!last.report && !last.errors.empty()) snapshot.unhealthy_reason = last.errors.front();
  return snapshot;
}

}  // namespace numaserve::agent::serve
