#include "serve/metrics.h"

#include "numaserve/common/prometheus.h"
#include "plan/plan_output.h"

namespace numaserve::agent::serve {
namespace {

std::string node_label(unsigned node) { return prometheus::label("numa_node", std::to_string(node)); }

}  // namespace

std::string render_metrics(const updater::CycleResult& last, const updater::Counters& counters) {
  std::string out;
  prometheus::TextWriter w(out);
  w.family("numaserve_agent_cycles_total", "counter", "Discover-plan-publish cycles run.")
      .sample("numaserve_agent_cycles_total", counters.cycles);
  w.family("numaserve_agent_failures_total", "counter", "Failed stages, by stage.");
  for (const char* stage : {"discover", "kubelet_files", "podresources", "plan", "publish", "apiserver"}) {
    const auto it = counters.failures.find(stage);
    w.sample("numaserve_agent_failures_total", it == counters.failures.end() ? 0 : it->second,
             prometheus::label("stage", stage));
  }
  w.family("numaserve_agent_apiserver_retries_total", "counter", "API server requests retried after a transient failure.")
      .sample("numaserve_agent_apiserver_retries_total", counters.apiserver_retries);
  w.family("numaserve_agent_apiserver_unchanged_total", "counter",
           "API server applies skipped because the object was already so.")
      .sample("numaserve_agent_apiserver_unchanged_total", counters.apiserver_unchanged);
  w.family("numaserve_agent_podresources_retries_total", "counter", "PodResources calls retried after a failure.")
      .sample("numaserve_agent_podresources_retries_total", counters.podresources_retries);
  w.family("numaserve_agent_files_changed_total", "counter", "Hint files rewritten because their content changed.")
      .sample("numaserve_agent_files_changed_total", counters.files_changed);
  w.family("numaserve_agent_last_success_timestamp_seconds", "gauge", "When the last cycle fully succeeded.")
      .sample("numaserve_agent_last_success_timestamp_seconds", static_cast<std::uint64_t>(counters.last_success_unix_seconds));

  if (const auto& report = last.report) {
    const Topology& t = report->topology;
    w.family("numaserve_node_numa_nodes", "gauge", "NUMA nodes, and how many have CPUs.")
        .sample("numaserve_node_numa_nodes", t.nodes.size(), "kind=\"all\"")
        .sample("numaserve_node_numa_nodes", t.nodes_with_cpus().count(), "kind=\"with_cpus\"");
    w.family("numaserve_node_cpus", "gauge", "Online CPUs per NUMA node.");
    for (const auto& node : t.nodes) w.sample("numaserve_node_cpus", node.cpus.count(), node_label(node.os_index));
    w.family("numaserve_node_memory_bytes", "gauge", "Memory per NUMA node.");
    for (const auto& node : t.nodes) {
      w.sample("numaserve_node_memory_bytes", node.memory_bytes, node_label(node.os_index));
    }
    w.family("numaserve_node_offline_cpus", "gauge", "CPUs present but offline.")
        .sample("numaserve_node_offline_cpus", t.offline_cpus.count());
    w.family("numaserve_node_threads_per_core", "gauge", "SMT threads per core.")
        .sample("numaserve_node_threads_per_core", t.threads_per_core());
    if (report->kernel && report->kernel->numa_balancing) {
      w.family("numaserve_node_numa_balancing", "gauge", "kernel.numa_balancing (0 is what pinned pods want).")
          .sample("numaserve_node_numa_balancing", *report->kernel->numa_balancing);
    }
    if (const auto& a = report->allocations) {
      w.family("numaserve_node_exclusive_cpus", "gauge", "CPUs held exclusively by pods, per NUMA node.");
      for (const auto& node : t.nodes) {
        w.sample("numaserve_node_exclusive_cpus", (a->exclusive_cpus & node.cpus).count(), node_label(node.os_index));
      }
      w.family("numaserve_agent_allocations_stale", "gauge",
               "1 when the pods' allocations are the last good view, the latest PodResources query having failed.")
          .sample("numaserve_agent_allocations_stale", a->stale ? 1 : 0);
    }
    w.family("numaserve_agent_warnings", "gauge", "Settings that work but hurt NUMA placement (see /topology).")
        .sample("numaserve_agent_warnings", report->warnings.size());
  }
  if (const auto& plan = last.plan) {
    w.family("numaserve_plan_reserved_cpus", "gauge", "CPUs the plan reserves for the system, per NUMA node.");
    for (const auto& room : plan->nodes) {
      w.sample("numaserve_plan_reserved_cpus", room.reserved_cpus.count(), node_label(room.node));
    }
    w.family("numaserve_plan_reserved_memory_bytes", "gauge", "Memory the plan reserves, per NUMA node.");
    for (const auto& [node, bytes] : plan->kubelet.reserved_memory) {
      w.sample("numaserve_plan_reserved_memory_bytes", bytes, node_label(node));
    }
    w.family("numaserve_plan_replica_cpus", "gauge", "CPUs one replica requests.")
        .sample("numaserve_plan_replica_cpus", plan->pod.cpus);
    w.family("numaserve_plan_replica_memory_bytes", "gauge", "Memory one replica requests.")
        .sample("numaserve_plan_replica_memory_bytes", plan->pod.memory_bytes);
    w.family("numaserve_plan_replicas", "gauge", "Replicas that fit this machine, one NUMA node each.")
        .sample("numaserve_plan_replicas", plan->pod.replicas_per_machine);
  }
  return out;
}

http::Snapshot snapshot_of(const updater::CycleResult& last, const updater::Counters& counters) {
  http::Snapshot snapshot;
  if (last.report) snapshot.topology_json = nlohmann::json(*last.report).dump(2) + "\n";
  if (last.plan) snapshot.plan_json = nlohmann::json(*last.plan).dump(2) + "\n";
  snapshot.metrics = render_metrics(last, counters);
  if (!last.report && !last.errors.empty()) snapshot.unhealthy_reason = last.errors.front();
  return snapshot;
}

}  // namespace numaserve::agent::serve
