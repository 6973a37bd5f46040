#include "kubelet/kubelet.h"

#include <algorithm>
#include <charconv>
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

// A state file's member that is not what the kubelet writes: the error
// names the file and the member, and the agent goes on without the file.
tl::unexpected<Error> bad_member(const std::string& file, const std::string& member, const std::string& want) {
  return make_error(Error::Code::kInvalidArgument, file + ": " + member + ": want " + want, member);
}

// The member `key` of `object` if it is there: an object, or an error.
Result<const nlohmann::json*> object_member(const nlohmann::json& object, const char* key, const std::string& file,
                                            const std::string& member) {
  const auto it = object.find(key);
  if (it == object.end()) return nullptr;
  if (!it->is_object()) return bad_member(file, member, "an object");
  return &*it;
}

// A kubelet state file: a JSON object that names its policy.
Result<nlohmann::json> parse_state(std::string_view text, const std::string& file, std::string& policy) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return make_error(Error::Code::kInvalidArgument, file + ": not a JSON object (truncated?)", file);
  }
  const auto name = json.find("policyName");
  if (name == json.end()) return make_error(Error::Code::kInvalidArgument, file + ": no policyName", "policyName");
  if (!name->is_string()) return bad_member(file, "policyName", "a string");
  policy = name->get<std::string>();
  if (policy.empty()) return bad_member(file, "policyName", "a policy's name, not an empty string");
  return json;
}

// A NUMA node's id as the Memory Manager writes it: a decimal number.
std::optional<unsigned> node_id(const std::string& key) {
  unsigned id = 0;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
  if (ec != std::errc() || end != key.data() + key.size() || key.empty() || id > CpuSet::kMaxId) return std::nullopt;
  return id;
}

// A block of `bytes` over `nodes`, charged to each: even shares, the first
// node takes the remainder (neither the API nor the state file says how a
// block spread over several nodes divides). Saturating: sizes come off the
// wire and from files.
void charge(std::map<unsigned, std::uint64_t>& on_nodes, const NodeSet& nodes, std::uint64_t bytes) {
  const auto ids = nodes.ids();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint64_t share = bytes / ids.size() + (i == 0 ? bytes % ids.size() : 0);
    on_nodes[ids[i]] = saturating_add(on_nodes[ids[i]], share);
  }
}

// Both managers' state files hold `entries`: pod UID -> container name ->
// what that container was given. Calls visit(pod, member, value) for each
// container, member naming it for errors; stops at the first error.
template <typename Visit>
Status each_container_entry(const nlohmann::json& json, const std::string& file, Visit visit) {
  auto entries = object_member(json, "entries", file, "entries");
  if (!entries) return tl::unexpected(entries.error());
  if (*entries == nullptr) return {};
  for (const auto& [pod, containers] : (*entries)->items()) {
    if (!containers.is_object()) return bad_member(file, "entries." + pod, "an object");
    for (const auto& [container, value] : containers.items()) {
      if (auto visited = visit(pod, "entries." + pod + "." + container, value); !visited) return visited;
    }
  }
  return {};
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
  auto parse_set = [&](const nlohmann::json& value, const std::string& member) -> Result<CpuSet> {
    if (!value.is_string()) return bad_member(file, member, "a CPU list string");
    auto set = CpuSet::parse_list(value.get<std::string>());
    if (!set) return tl::unexpected(std::move(set.error()).with_context(file + ": " + member));
    return *set;
  };
  if (const auto it = json->find("defaultCpuSet"); it != json->end()) {
    auto set = parse_set(*it, "defaultCpuSet");
    if (!set) return tl::unexpected(set.error());
    out.default_cpu_set = *set;
  }
  // entries: pod UID -> container name -> cpuset
  auto visited = each_container_entry(*json, file, [&](const std::string& pod, const std::string& member,
                                                       const nlohmann::json& value) -> Status {
    auto set = parse_set(value, member);
    if (!set) return tl::unexpected(set.error());
    out.pods[pod] |= *set;
    return {};
  });
  if (!visited) return tl::unexpected(visited.error());
  return out;
}

Result<MemoryManagerState> parse_memory_manager_state(std::string_view text, const std::string& file) {
  MemoryManagerState out;
  auto json = parse_state(text, file, out.policy);
  if (!json) return tl::unexpected(json.error());
  // machineState: NUMA node -> memoryMap -> resource -> {total, reserved, free, ...};
  // "reserved" is what containers have been assigned.
  auto machine_state = object_member(*json, "machineState", file, "machineState");
  if (!machine_state) return tl::unexpected(machine_state.error());
  const nlohmann::json no_nodes = nlohmann::json::object();
  for (const auto& [node, state] : (*machine_state ? **machine_state : no_nodes).items()) {
    const std::string member = "machineState." + node;
    const auto id = node_id(node);
    if (!id) return bad_member(file, member, "a NUMA node id (a decimal number) as the key");
    if (!state.is_object()) return bad_member(file, member, "an object");
    const std::string reserved = member + ".memoryMap.memory.reserved";
    auto map = object_member(state, "memoryMap", file, member + ".memoryMap");
    if (!map) return tl::unexpected(map.error());
    if (*map == nullptr) return bad_member(file, reserved, "a number of bytes");
    auto memory = object_member(**map, "memory", file, member + ".memoryMap.memory");
    if (!memory) return tl::unexpected(memory.error());
    if (*memory == nullptr) return bad_member(file, reserved, "a number of bytes");
    const auto bytes = (*memory)->find("reserved");
    if (bytes == (*memory)->end() || !bytes->is_number_unsigned()) return bad_member(file, reserved, "a number of bytes");
    out.assigned_memory[*id] = bytes->get<std::uint64_t>();
    if (const auto allocatable = (*memory)->find("allocatable"); allocatable != (*memory)->end()) {
      if (!allocatable->is_number_unsigned()) return bad_member(file, member + ".memoryMap.memory.allocatable", "a number of bytes");
      out.allocatable_memory[*id] = allocatable->get<std::uint64_t>();
    }
  }
  // entries: pod UID -> container -> [{numaAffinity: [node...], type, size}]
  auto visited = each_container_entry(*json, file, [&](const std::string& pod, const std::string& member,
                                                       const nlohmann::json& blocks) -> Status {
    if (!blocks.is_array()) return bad_member(file, member, "an array of memory blocks");
    for (const auto& block : blocks) {
      const auto type = block.find("type");
      const auto size = block.find("size");
      const auto affinity = block.find("numaAffinity");
      if (!block.is_object() || type == block.end() || !type->is_string() || size == block.end() ||
          !size->is_number_unsigned() || affinity == block.end() || !affinity->is_array()) {
        return bad_member(file, member, "memory blocks of {numaAffinity, type, size}");
      }
      if (*type != "memory") continue;
      NodeSet nodes;
      for (const auto& node : *affinity) {
        if (!node.is_number_unsigned() || node.get<std::uint64_t>() > CpuSet::kMaxId) {
          return bad_member(file, member + ".numaAffinity", "NUMA node ids");
        }
        nodes.insert(node.get<unsigned>());
      }
      charge(out.pods[pod], nodes, size->get<std::uint64_t>());
    }
    return {};
  });
  if (!visited) return tl::unexpected(visited.error());
  return out;
}

CpuSet CpuManagerState::exclusive_cpus() const {
  CpuSet out;
  for (const auto& [pod, cpus] : pods) out |= cpus;
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
        std::map<unsigned, std::uint64_t> on_nodes;
        charge(on_nodes, block.nodes, block.bytes);
        for (const auto& [node, bytes] : on_nodes) {
          std::uint64_t& total = out.assigned[node][block.resource];
          total = saturating_add(total, bytes);
        }
      }
    }
  }
  out.pods = std::move(pods);
  return out;
}

Allocations allocations_of_state_files(std::string source, const std::optional<CpuManagerState>& cpus,
                                       const std::optional<MemoryManagerState>& memory,
                                       const std::set<std::string>& ended) {
  Allocations out;
  out.source = std::move(source);
  if (cpus) {
    for (const auto& [pod, set] : cpus->pods) {
      if (!ended.contains(pod)) out.exclusive_cpus |= set;
    }
  }
  if (memory) {
    for (const auto& [node, bytes] : memory->assigned_memory) out.assigned[node]["memory"] = bytes;
    for (const auto& [pod, on_nodes] : memory->pods) {
      if (!ended.contains(pod)) continue;
      for (const auto& [node, bytes] : on_nodes) {
        std::uint64_t& total = out.assigned[node]["memory"];
        total -= std::min(total, bytes);
      }
    }
    out.allocatable_memory = memory->allocatable_memory;
  }
  return out;
}

}  // namespace numaserve::agent::kubelet
