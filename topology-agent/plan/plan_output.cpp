#include "plan/plan_output.h"

#include <yaml-cpp/yaml.h>

#include <sstream>

#include "numaserve/common/quantity.h"
#include "numaserve/common/topology_json.h"

namespace numaserve::agent::plan {
namespace {

// Kubernetes reads these maps as map[string]string: a bare `true` or `16`
// would arrive as a bool or a number and fail to load.
YAML::Emitter& quoted(YAML::Emitter& out, const std::string& value) {
  return out << YAML::DoubleQuoted << value;
}

}  // namespace

void to_json(nlohmann::json& j, const NodePlan& plan) {
  nlohmann::json reserved_memory = nlohmann::json::array();
  for (const auto& [node, bytes] : plan.kubelet.reserved_memory) {
    reserved_memory.push_back({{"numa_node", node}, {"bytes", bytes}, {"quantity", format_quantity(bytes)}});
  }
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& room : plan.nodes) {
    nodes.push_back({{"node", room.node},
                     {"cpus", room.cpus},
                     {"reserved_cpus", room.reserved_cpus},
                     {"allocatable_cpus", room.allocatable_cpus},
                     {"allocatable_cpu_count", room.allocatable_cpus.count()},
                     {"memory_bytes", room.memory_bytes},
                     {"reserved_memory_bytes", room.reserved_memory},
                     {"allocatable_memory_bytes", room.allocatable_memory},
                     {"replicas", room.replicas}});
  }
  const auto& k = plan.kubelet;
  j = {{"kubelet",
        {{"cpu_manager_policy", "static"},
         {"full_pcpus_only", k.full_pcpus_only},
         {"topology_manager_policy", "single-numa-node"},
         {"topology_manager_scope", "pod"},
         {"max_allowable_numa_nodes", k.max_allowable_numa_nodes ? nlohmann::json(*k.max_allowable_numa_nodes)
                                                                 : nlohmann::json()},
         {"memory_manager_policy", "Static"},
         {"reserved_system_cpus", k.reserved_system_cpus},
         {"kube_reserved_memory_bytes", k.kube_reserved_memory},
         {"system_reserved_memory_bytes", k.system_reserved_memory},
         {"eviction_hard_memory_bytes", k.eviction_hard_memory},
         {"reserved_memory", reserved_memory}}},
       {"nodes", nodes},
       {"pod",
        {{"cpus", plan.pod.cpus},
         {"memory_bytes", plan.pod.memory_bytes},
         {"memory", format_quantity(plan.pod.memory_bytes)},
         {"replicas_per_numa_node", plan.pod.replicas_per_numa_node},
         {"replicas_per_machine", plan.pod.replicas_per_machine}}},
       {"notes", plan.notes}};
}

std::string kubelet_config_yaml(const NodePlan& plan) {
  const auto& k = plan.kubelet;
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << "kubelet.config.k8s.io/v1beta1";
  out << YAML::Key << "kind" << YAML::Value << "KubeletConfiguration";
  out << YAML::Key << "cpuManagerPolicy" << YAML::Value << "static";
  if (k.full_pcpus_only) {
    out << YAML::Key << "cpuManagerPolicyOptions" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "full-pcpus-only" << YAML::Value;
    quoted(out, "true") << YAML::EndMap;
  }
  out << YAML::Key << "topologyManagerPolicy" << YAML::Value << "single-numa-node";
  out << YAML::Key << "topologyManagerScope" << YAML::Value << "pod";
  if (k.max_allowable_numa_nodes) {
    out << YAML::Key << "topologyManagerPolicyOptions" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "max-allowable-numa-nodes" << YAML::Value;
    quoted(out, std::to_string(*k.max_allowable_numa_nodes)) << YAML::EndMap;
  }
  out << YAML::Key << "memoryManagerPolicy" << YAML::Value << "Static";
  out << YAML::Key << "reservedSystemCPUs" << YAML::Value;
  quoted(out, k.reserved_system_cpus.to_list());
  out << YAML::Key << "kubeReserved" << YAML::Value << YAML::BeginMap << YAML::Key << "memory"
      << YAML::Value << format_quantity(k.kube_reserved_memory) << YAML::EndMap;
  out << YAML::Key << "systemReserved" << YAML::Value << YAML::BeginMap << YAML::Key << "memory"
      << YAML::Value << format_quantity(k.system_reserved_memory) << YAML::EndMap;
  // Setting evictionHard replaces the kubelet's whole default map, so the
  // other defaults are restated.
  out << YAML::Key << "evictionHard" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "memory.available" << YAML::Value << format_quantity(k.eviction_hard_memory);
  out << YAML::Key << "nodefs.available" << YAML::Value << "10%";
  out << YAML::Key << "nodefs.inodesFree" << YAML::Value << "5%";
  out << YAML::Key << "imagefs.available" << YAML::Value << "15%";
  out << YAML::EndMap;
  out << YAML::Key << "reservedMemory" << YAML::Value << YAML::BeginSeq;
  for (const auto& [node, bytes] : k.reserved_memory) {
    out << YAML::BeginMap << YAML::Key << "numaNode" << YAML::Value << node;
    out << YAML::Key << "limits" << YAML::Value << YAML::BeginMap << YAML::Key << "memory" << YAML::Value
        << format_quantity(bytes) << YAML::EndMap << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return "# Written by numaserve-topology-agent: one Guaranteed pod per NUMA node.\n" +
         std::string(out.c_str()) + "\n";
}

std::string helm_values_yaml(const NodePlan& plan) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "replicasPerMachine" << YAML::Value << plan.pod.replicas_per_machine;
  out << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
  for (const char* kind : {"requests", "limits"}) {
    out << YAML::Key << kind << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "cpu" << YAML::Value << plan.pod.cpus;
    out << YAML::Key << "memory" << YAML::Value << format_quantity(plan.pod.memory_bytes);
    out << YAML::EndMap;
  }
  out << YAML::EndMap << YAML::EndMap;
  return "# Written by numaserve-topology-agent for charts/numaserve: one replica per NUMA node\n"
         "# (replicasPerMachine counts per Kubernetes node, i.e. per machine),\n"
         "# Guaranteed QoS (requests = limits, integer CPUs).\n" +
         std::string(out.c_str()) + "\n";
}

std::string render_text(const NodePlan& plan) {
  std::ostringstream out;
  const auto& k = plan.kubelet;
  out << "Replica: " << plan.pod.cpus << " CPUs, " << format_quantity(plan.pod.memory_bytes)
      << " (Guaranteed), " << plan.pod.replicas_per_numa_node << " per NUMA node, "
      << plan.pod.replicas_per_machine << " per machine\n";
  out << "Kubelet: cpuManagerPolicy static" << (k.full_pcpus_only ? " (full-pcpus-only)" : "")
      << ", topologyManagerPolicy single-numa-node (scope pod"
      << (k.max_allowable_numa_nodes ? ", max-allowable-numa-nodes " + std::to_string(*k.max_allowable_numa_nodes) : "")
      << "), memoryManagerPolicy Static, reservedSystemCPUs " << k.reserved_system_cpus.to_list() << "\n";
  for (const auto& room : plan.nodes) {
    out << "  NUMA node " << room.node << ": CPUs " << room.cpus.to_list() << ", reserved "
        << room.reserved_cpus.to_list() << ", allocatable " << room.allocatable_cpus.count() << " CPUs, "
        << format_quantity(room.allocatable_memory / (1ull << 20) * (1ull << 20)) << " of "
        << format_quantity(room.memory_bytes / (1ull << 20) * (1ull << 20)) << " after reserving "
        << format_quantity(room.reserved_memory) << ", "
        << (room.replicas > 0 ? std::to_string(room.replicas) + " replica(s)" : "no replica") << "\n";
  }
  for (const auto& note : plan.notes) out << "note: " << note << "\n";
  return out.str();
}

}  // namespace numaserve::agent::plan
