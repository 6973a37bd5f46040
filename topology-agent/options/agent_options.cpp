#include "options/agent_options.h"

#include <unistd.h>

#include <cstdlib>

#include "numaserve/common/quantity.h"

namespace numaserve::agent::options {

std::string default_node_name() {
  if (const char* name = std::getenv("NODE_NAME"); name != nullptr && *name != '\0') return name;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

namespace {

// A share: more than 0, at most 1.
Status set_fraction(const std::string& name, const std::string& text, double& target) {
  double value = 0;
  if (auto parsed = set_double(name, text, value); !parsed) return parsed;
  if (!(value > 0 && value <= 1)) {
    return make_error(Error::Code::kInvalidArgument, name + ": '" + text + "' is not a share (0 < F <= 1)", name);
  }
  target = value;
  return {};
}

Status set_fingerprint_method(const std::string& text, publish::FingerprintMethod& target) {
  for (auto method : {publish::FingerprintMethod::kWithExclusiveResources, publish::FingerprintMethod::kAll}) {
    if (text == publish::to_string(method)) {
      target = method;
      return {};
    }
  }
  return make_error(Error::Code::kInvalidArgument,
                    "fingerprint_method: '" + text + "' is not with-exclusive-resources or all", "fingerprint_method");
}

// Events a second: more than 0.
Status set_rate(const std::string& name, const std::string& text, double& target) {
  double value = 0;
  if (auto parsed = set_double(name, text, value); !parsed) return parsed;
  if (!(value > 0)) return make_error(Error::Code::kInvalidArgument, name + ": '" + text + "' is not above 0", name);
  target = value;
  return {};
}

Status set_milliseconds(const std::string& name, const std::string& text, std::chrono::milliseconds& target) {
  double seconds = 0;
  if (auto parsed = numaserve::set_seconds(name, text, seconds); !parsed) return parsed;
  if (seconds < 0.001) {
    return make_error(Error::Code::kInvalidArgument, name + ": '" + text + "' is shorter than 1ms", name);
  }
  target = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  return {};
}

// Every option of the agent, once, with the groups that take it.
struct Row {
  int groups;
  OptionSpec spec;
};

std::vector<Row> agent_options(AgentOptions& o) {
  auto& p = o.plan;
  return {
      {kSource, {"xml", "FILE", "Describe the machine in this hwloc XML export instead of this one", "",
                 [&o](const std::string& t) { return set_string(o.xml, t); }}},
      {kSource, {"sysfs_root", "DIR", "Read /sys and /proc under DIR (the host's, mounted at /host in the pod)", "",
                 [&o](const std::string& t) { return set_string(o.sysfs_root, t); }}},
      {kSource, {"synthetic", "DESC", "Describe an hwloc synthetic machine, e.g. \"pack:2 numa:1 core:8 pu:2\"", "",
                 [&o](const std::string& t) { return set_string(o.synthetic, t); }}},
      {kSource, {"kubelet_config", "FILE", "The kubelet's KubeletConfiguration, e.g. /var/lib/kubelet/config.yaml", "",
                 [&o](const std::string& t) { return set_string(o.kubelet_config, t); }}},
      {kSource, {"kubelet_state_dir", "DIR", "Where cpu_manager_state and memory_manager_state are, e.g. /var/lib/kubelet",
                 "", [&o](const std::string& t) { return set_string(o.kubelet_state_dir, t); }}},
      {kSource, {"podresources_socket", "FILE",
                 "The kubelet's PodResources API socket (\"\" to not ask it); without it, the state files are read",
                 o.podresources.socket.string(),
                 [&o](const std::string& t) {
                   std::string socket;
                   auto set = set_string(socket, t);
                   o.podresources.socket = socket;
                   return set;
                 }}},
      {kSource, {"podresources_timeout", "DURATION", "Deadline of each PodResources call (retried twice with backoff)",
                 std::to_string(o.podresources.deadline.count()) + "ms",
                 [&o](const std::string& t) { return set_milliseconds("podresources_timeout", t, o.podresources.deadline); }}},
      {kPlan | kRun, {"fingerprint_method", "METHOD",
                      "Pods the NodeResourceTopology's pod-set fingerprint counts: with-exclusive-resources or all",
                      std::string(publish::to_string(o.fingerprint_method)),
                      [&o](const std::string& t) { return set_fingerprint_method(t, o.fingerprint_method); }}},
      {kPlan, {"reserved_cores_per_node", "N", "Whole cores per NUMA node kept for the system (reservedSystemCPUs)",
               std::to_string(p.reserved_cores_per_node),
               [&p](const std::string& t) { return numaserve::set_unsigned("reserved_cores_per_node", t, p.reserved_cores_per_node); }}},
      {kPlan, {"kube_reserved_memory", "QUANTITY", "kubeReserved memory", format_quantity(p.kube_reserved_memory),
               [&p](const std::string& t) { return numaserve::set_quantity("kube_reserved_memory", t, p.kube_reserved_memory); }}},
      {kPlan, {"system_reserved_memory", "QUANTITY", "systemReserved memory", format_quantity(p.system_reserved_memory),
               [&p](const std::string& t) { return numaserve::set_quantity("system_reserved_memory", t, p.system_reserved_memory); }}},
      {kPlan, {"eviction_hard_memory", "QUANTITY", "evictionHard memory.available", format_quantity(p.eviction_hard_memory),
               [&p](const std::string& t) { return numaserve::set_quantity("eviction_hard_memory", t, p.eviction_hard_memory); }}},
      {kPlan, {"pod_memory_fraction", "F", "Share of a NUMA node's allocatable memory one replica requests", "0.9",
               [&p](const std::string& t) { return set_fraction("pod_memory_fraction", t, p.pod_memory_fraction); }}},
      {kPlan, {"replicas_per_numa_node", "N", "Replicas sharing one NUMA node", "1",
               [&p](const std::string& t) { return numaserve::set_unsigned("replicas_per_numa_node", t, p.replicas_per_node); }}},
      {kPlan | kRun, {"node_name", "NAME", "Kubernetes node name (NUMASERVE_NODE_NAME or NODE_NAME; default the host name)",
                      "", [&o](const std::string& t) { return set_string(o.node_name, t); }}},
      {kRun, {"interval", "DURATION", "Rediscover this often (also on SIGHUP)", "60s",
              [&o](const std::string& t) { return numaserve::set_seconds("interval", t, o.interval_seconds); }}},
      {kRun, {"max_events_per_second", "N",
              "Most cycles a second that kubelet state changes trigger (inotify); --interval still runs", "1",
              [&o](const std::string& t) { return set_rate("max_events_per_second", t, o.max_events_per_second); }}},
      {kRun, {"listen_address", "ADDR", "Address for /topology, /plan, /metrics, /healthz", "0.0.0.0",
              [&o](const std::string& t) { return set_string(o.listen_address, t); }}},
      {kRun, {"port", "N", "Port for the HTTP endpoint; 0 picks a free one", "9300",
              [&o](const std::string& t) { return numaserve::set_unsigned("port", t, o.port, 65535); }}},
      {kRun, {"hints_dir", "DIR", "Where topology.json, plan.json, kubelet-config.yaml... are written", "/var/lib/numaserve/hints",
              [&o](const std::string& t) { return set_string(o.hints_dir, t); }}},
      {kRun, {"kubelet_dropin_dir", "DIR", "Also write the kubelet drop-in here (opt-in; never restarts the kubelet)", "",
              [&o](const std::string& t) { return set_string(o.kubelet_dropin_dir, t); }}},
      {kRun, {"oneshot", "", "Run one cycle and exit (status 1 if it failed)", "false",
              [&o](const std::string& t) { return numaserve::set_bool("oneshot", t, o.oneshot); }}},
      {kRun, {"no_publish", "", "Discover and plan, but write nothing", "false",
              [&o](const std::string& t) { return numaserve::set_bool("no_publish", t, o.no_publish); }}},
      {kRun, {"no_apiserver", "", "Do not apply the NodeResourceTopology and labels even in a cluster", "false",
              [&o](const std::string& t) { return numaserve::set_bool("no_apiserver", t, o.no_apiserver); }}},
      {kRun, {"apiserver_url", "URL", "API server to apply to (default in a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)",
              "", [&o](const std::string& t) { return set_string(o.apiserver_url, t); }}},
      {kRun, {"apiserver_ca_file", "FILE", "CA bundle for the API server (default the service account's ca.crt)", "",
              [&o](const std::string& t) { return set_string(o.apiserver_ca_file, t); }}},
      {kRun, {"apiserver_token_file", "FILE", "Bearer token file (default the service account's token)", "",
              [&o](const std::string& t) { return set_string(o.apiserver_token_file, t); }}},
  };
}

}  // namespace

OptionTable table_for(AgentOptions& o, int groups) {
  std::vector<OptionSpec> specs;
  for (auto& row : agent_options(o)) {
    if (row.groups & groups) specs.push_back(std::move(row.spec));
  }
  if (groups & kRun) {
    for (auto& row : numaserve::log_options(o.log)) specs.push_back(std::move(row));
  }
  return numaserve::OptionTable(std::move(specs));
}

}  // namespace numaserve::agent::options
