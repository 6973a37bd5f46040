#include "kubelet/kubelet.h"

#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "numaserve/common/quantity.h"
#include "numaserve/common/yaml_file.h"

namespace numaserve::agent::kubelet {
namespace {

// Every top-level field of KubeletConfiguration v1beta1 (Kubernetes 1.33),
// from the kubelet-config.v1beta1 reference.
constexpr std::string_view kKnownFields[] = {
    "apiVersion", "kind", "enableServer", "staticPodPath", "podLogsDir", "syncFrequency",
    "fileCheckFrequency", "httpCheckFrequency", "staticPodURL", "staticPodURLHeader", "address", "port",
    "readOnlyPort", "tlsCertFile", "tlsPrivateKeyFile", "tlsCipherSuites", "tlsMinVersion",
    "rotateCertificates", "serverTLSBootstrap", "authentication", "authorization", "registryPullQPS",
    "registryBurst", "imagePullCredentialsVerificationPolicy", "preloadedImagesVerificationAllowlist",
    "eventRecordQPS", "eventBurst", "enableDebuggingHandlers", "enableContentionProfiling", "healthzPort",
    "healthzBindAddress", "oomScoreAdj", "clusterDomain", "clusterDNS", "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency", "nodeStatusReportFrequency", "nodeLeaseDurationSeconds",
    "imageMinimumGCAge", "imageMaximumGCAge", "imageGCHighThresholdPercent", "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod", "kubeletCgroups", "systemCgroups", "cgroupRoot", "cgroupsPerQOS",
    "cgroupDriver", "cpuManagerPolicy", "singleProcessOOMKill", "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod", "memoryManagerPolicy", "topologyManagerPolicy", "topologyManagerScope",
    "topologyManagerPolicyOptions", "qosReserved", "runtimeRequestTimeout", "hairpinMode", "maxPods",
    "podCIDR", "podPidsLimit", "resolvConf", "runOnce", "cpuCFSQuota", "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages", "maxOpenFiles", "contentType", "kubeAPIQPS", "kubeAPIBurst",
    "serializeImagePulls", "maxParallelImagePulls", "evictionHard", "evictionSoft",
    "evictionSoftGracePeriod", "evictionPressureTransitionPeriod", "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim", "mergeDefaultEvictionSettings", "podsPerCore",
    "enableControllerAttachDetach", "protectKernelDefaults", "makeIPTablesUtilChains",
    "iptablesMasqueradeBit", "iptablesDropBit", "featureGates", "failSwapOn", "memorySwap",
    "containerLogMaxSize", "containerLogMaxFiles", "containerLogMaxWorkers", "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy", "systemReserved", "kubeReserved", "reservedSystemCPUs",
    "showHiddenMetricsForVersion", "systemReservedCgroup", "kubeReservedCgroup", "enforceNodeAllocatable",
    "allowedUnsafeSysctls", "volumePluginDir", "providerID", "kernelMemcgNotification", "logging",
    "enableSystemLogHandler", "enableSystemLogQuery", "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods", "shutdownGracePeriodByPodPriority", "crashLoopBackOff",
    "reservedMemory", "enableProfilingHandler", "enableDebugFlagsHandler", "seccompDefault",
    "memoryThrottlingFactor", "registerWithTaints", "registerNode", "tracing",
    "localStorageCapacityIsolation", "containerRuntimeEndpoint", "imageServiceEndpoint", "failCgroupV1",
    "userNamespaces"};

Result<std::string> scalar(const YamlNode& map, const char* key, const std::string& fallback,
                           const std::string& file) {
  const YamlNode value = map[key];
  if (!value) return fallback;
  if (!value.is_scalar()) {
    return make_error(Error::Code::kInvalidArgument, yaml_location(file, value) + ": " + key + " must be a string", key);
  }
  return value.text().value_or("");
}

Result<std::map<std::string, std::string>> string_map(const YamlNode& map, const char* key,
                                                      const std::string& file) {
  std::map<std::string, std::string> out;
  const YamlNode value = map[key];
  if (!value) return out;
  if (!value.is_map()) {
    return make_error(Error::Code::kInvalidArgument, yaml_location(file, value) + ": " + key + " must be a map", key);
  }
  for (const auto& entry : value.entries()) {
    if (!entry.second.is_scalar()) {
      return make_error(Error::Code::kInvalidArgument,
                        yaml_location(file, entry.second) + ": " + key + " values must be strings", key);
    }
    auto name = yaml_key(file, entry.first);
    if (!name) return tl::unexpected(name.error());
    out[*name] = entry.second.text().value_or("");
  }
  return out;
}

// A kubelet state file: a JSON object that names its policy.
Result<nlohmann::json> parse_state(std::string_view text, const std::string& file, std::string& policy) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return make_error(Error::Code::kInvalidArgument, file + ": not a JSON object (truncated?)", file);
  }
  policy = json.value("policyName", "");
  if (policy.empty()) return make_error(Error::Code::kInvalidArgument, file + ": no policyName", "policyName");
  return json;
}

}  // namespace

Result<KubeletConfig> parse_kubelet_config(std::string_view yaml, const std::string& file) {
  auto parsed = parse_yaml(std::string(yaml), file);
  if (!parsed) return tl::unexpected(parsed.error());
  const YamlNode& root = *parsed;
  if (!root.is_map()) {
    return make_error(Error::Code::kInvalidArgument, file + ": not a KubeletConfiguration (a YAML map)", file);
  }
  const std::string kind = root["kind"] && root["kind"].is_scalar() ? root["kind"].text().value_or("") : "";
  if (kind != "KubeletConfiguration") {
    return make_error(Error::Code::kInvalidArgument,
                      file + ": kind is '" + kind + "', want KubeletConfiguration", "kind");
  }
  KubeletConfig out;
  for (const auto& entry : root.entries()) {
    auto name = yaml_key(file, entry.first);
    if (!name) return tl::unexpected(name.error());
    const std::string& key = *name;
    if (std::find(std::begin(kKnownFields), std::end(kKnownFields), key) == std::end(kKnownFields)) {
      out.unknown_fields.push_back(key + " (line " + std::to_string(entry.first.line()) + ")");
    }
  }
  auto read = [&](const char* key, const char* fallback, std::string& target) -> Status {
    auto value = scalar(root, key, fallback, file);
    if (!value) return tl::unexpected(value.error());
    target = *value;
    return {};
  };
  for (const Status& s : {read("cpuManagerPolicy", "none", out.cpu_manager_policy),
                          read("topologyManagerPolicy", "none", out.topology_manager_policy),
                          read("topologyManagerScope", "container", out.topology_manager_scope),
                          read("memoryManagerPolicy", "None", out.memory_manager_policy)}) {
    if (!s) return tl::unexpected(s.error());
  }
  auto cpu_options = string_map(root, "cpuManagerPolicyOptions", file);
  if (!cpu_options) return tl::unexpected(cpu_options.error());
  out.cpu_manager_policy_options = *cpu_options;
  auto topology_options = string_map(root, "topologyManagerPolicyOptions", file);
  if (!topology_options) return tl::unexpected(topology_options.error());
  out.topology_manager_policy_options = *topology_options;
  auto reserved = scalar(root, "reservedSystemCPUs", "", file);
  if (!reserved) return tl::unexpected(reserved.error());
  auto cpus = CpuSet::parse_list(*reserved);
  if (!cpus) {
    return tl::unexpected(std::move(cpus.error()).with_context(yaml_location(file, root["reservedSystemCPUs"]) +
                                                                ": reservedSystemCPUs"));
  }
  out.reserved_system_cpus = *cpus;
  return out;
}

Result<CpuManagerState> parse_cpu_manager_state(std::string_view text, const std::string& file) {
  CpuManagerState out;
  auto json = parse_state(text, file, out.policy);
  if (!json) return tl::unexpected(json.error());
  auto parse_set = [&](const nlohmann::json& value, const std::string& where) -> Result<CpuSet> {
    if (!value.is_string()) return make_error(Error::Code::kInvalidArgument, file + ": " + where + " is not a string");
    auto set = CpuSet::parse_list(value.get<std::string>());
    if (!set) return tl::unexpected(std::move(set.error()).with_context(file + ": " + where));
    return *set;
  };
  if (json->contains("defaultCpuSet")) {
    auto set = parse_set((*json)["defaultCpuSet"], "defaultCpuSet");
    if (!set) return tl::unexpected(set.error());
    out.default_cpu_set = *set;
  }
  // entries: pod UID -> container name -> cpuset
  const nlohmann::json entries = json->value("entries", nlohmann::json::object());
  for (const auto& [pod, containers] : entries.items()) {
    if (!containers.is_object()) {
      return make_error(Error::Code::kInvalidArgument, file + ": entries." + pod + " is not an object");
    }
    for (const auto& [container, value] : containers.items()) {
      auto set = parse_set(value, "entries." + pod + "." + container);
      if (!set) return tl::unexpected(set.error());
      out.exclusive_cpus |= *set;
    }
  }
  return out;
}

Result<MemoryManagerState> parse_memory_manager_state(std::string_view text, const std::string& file) {
  MemoryManagerState out;
  auto json = parse_state(text, file, out.policy);
  if (!json) return tl::unexpected(json.error());
  // machineState: NUMA node -> memoryMap -> resource -> {total, reserved, free, ...};
  // "reserved" is what containers have been assigned.
  const nlohmann::json machine_state = json->value("machineState", nlohmann::json::object());
  for (const auto& [node, state] : machine_state.items()) {
    const auto memory = state.is_object() ? state.value("memoryMap", nlohmann::json::object()).value(
                                                "memory", nlohmann::json::object())
                                          : nlohmann::json();
    if (!memory.is_object() || !memory.contains("reserved") || !memory["reserved"].is_number_unsigned()) {
      return make_error(Error::Code::kInvalidArgument,
                        file + ": machineState." + node + ".memoryMap.memory.reserved missing or not a number");
    }
    unsigned id = 0;
    try {
      id = static_cast<unsigned>(std::stoul(node));
    } catch (const std::exception&) {
      return make_error(Error::Code::kInvalidArgument, file + ": machineState key '" + node + "' is not a node id");
    }
    out.assigned_memory[id] = memory["reserved"].get<std::uint64_t>();
  }
  return out;
}

bool PodAllocation::exclusive() const {
  return std::any_of(containers.begin(), containers.end(), [](const ContainerAllocation& c) {
    return !c.cpus.empty() || !c.memory.empty() || c.devices > 0;
  });
}

Allocations allocations_of_pods(std::string source, std::optional<Allocatable> allocatable,
                                std::vector<PodAllocation> pods) {
  Allocations out;
  out.source = std::move(source);
  out.allocatable = std::move(allocatable);
  for (const auto& pod : pods) {
    for (const auto& container : pod.containers) {
      out.exclusive_cpus |= container.cpus;
      for (const auto& block : container.memory) {
        const auto nodes = block.nodes.ids();
        if (nodes.empty()) continue;
        for (std::size_t i = 0; i < nodes.size(); ++i) {
          // Even shares; the first node takes the remainder. Saturating:
          // sizes come off the wire.
          const std::uint64_t share = block.bytes / nodes.size() + (i == 0 ? block.bytes % nodes.size() : 0);
          std::uint64_t& total = out.assigned[nodes[i]][block.resource];
          total = saturating_add(total, share);
        }
      }
    }
  }
  out.pods = std::move(pods);
  return out;
}

Allocations allocations_of_state_files(std::string source, const std::optional<CpuManagerState>& cpus,
                                       const std::optional<MemoryManagerState>& memory) {
  Allocations out;
  out.source = std::move(source);
  if (cpus) out.exclusive_cpus = cpus->exclusive_cpus;
  if (memory) {
    for (const auto& [node, bytes] : memory->assigned_memory) out.assigned[node]["memory"] = bytes;
  }
  return out;
}

}  // namespace numaserve::agent::kubelet
