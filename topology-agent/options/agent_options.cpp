#include "options/agent_options.h"


#include <cstdlib>

#include "numaserve/common/duration.h"
#include "numaserve/common/placement.h"
#include "numaserve/common/quantity.h"
#include "publish/renderings.h"

namespace numaserve::agent::options {

std::string default_node_name() {
  if (const char* name = std::getenv("NODE_NAME"); name != nullptr && *name != '\0') return name;
  return host_name();
}

discover::DiscoverConfig AgentOptions::discover_config() const {
  discover::DiscoverConfig out;
  if (!xml.empty()) out.source = TopologySource::xml(xml);
  if (!sysfs_root.empty()) out.source = TopologySource::sysfs(sysfs_root);
  if (!synthetic.empty()) out.source = TopologySource::synthetic(synthetic);
  if (!kubelet_config.empty()) out.kubelet_config = kubelet_config;
  if (!kubelet_state_dir.empty()) out.kubelet_state_dir = kubelet_state_dir;
  if (!podresources.socket.empty()) out.podresources = podresources;
  return out;
}

updater::UpdaterConfig AgentOptions::updater_config() const {
  updater::UpdaterConfig config = updater;
  config.discover = discover_config();
  config.publish = !no_publish;
  if (!kubelet_dropin_dir.empty()) config.kubelet_dropin_dir = kubelet_dropin_dir;
  if (!no_apiserver) config.apiserver = apiserver.config();
  return config;
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
  const auto& names = publish::kFingerprintMethodNames;
  const auto method = names.parse(text);
  if (!method) {
    return make_error(Error::Code::kInvalidArgument, "fingerprint_method: '" + text + "' is not " + names.choices(),
                      "fingerprint_method");
  }
  target = *method;
  return {};
}

// A value parsed by a part's own parser; its error names the option.
template <class Parse, class T>
Status set_parsed(const std::string& name, const std::string& text, Parse parse, T& target) {
  auto parsed = parse(text);
  if (!parsed) return make_error(Error::Code::kInvalidArgument, parsed.error().message, name);
  target = std::move(*parsed);
  return {};
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
  target = to_duration<std::chrono::milliseconds>(seconds);
  return {};
}

OptionSpec fraction_option(std::string name, std::string help, double& target) {
  return {name, "F", std::move(help), format_number(target),
          [name, &target](const std::string& t) { return set_fraction(name, t, target); }};
}

// plan -o: one of the renderings' names (cluster-plan takes three of them).
OptionSpec output_option(std::string& target) {
  std::string names;
  for (const auto& r : publish::renderings()) names += (names.empty() ? "" : ", ") + std::string(r.name);
  OptionSpec row{"output", "FORMAT", "plan: print the plan as " + names + "; cluster-plan: as text, json, yaml or helm-values",
                 target, [&target](const std::string& t) {
                   if (publish::find_rendering(t) == nullptr) {
                     return Status(make_error(Error::Code::kInvalidArgument, "output: '" + t + "' is not a rendering", "output"));
                   }
                   target = t;
                   return Status();
                 }};
  row.short_flag = 'o';
  return row;
}

// Every option of the agent, once, with the groups that take it.
struct Row {
  int groups;
  OptionSpec spec;
};

// Where the machine and the kubelet are read from.
std::vector<Row> source_rows(AgentOptions& o) {
  return {
    {kSource, text_option("xml", "FILE", "Describe the machine in this hwloc XML export instead of this one", o.xml)},
    {kSource, text_option("sysfs_root", "DIR", "Read /sys and /proc under DIR (the host's, mounted at /host in the pod)",
                          o.sysfs_root)},
    {kSource, text_option("synthetic", "DESC", "Describe an hwloc synthetic machine, e.g. \"pack:2 numa:1 core:8 pu:2\"",
                          o.synthetic)},
    {kSource, text_option("kubelet_config", "FILE", "The kubelet's KubeletConfiguration, e.g. /var/lib/kubelet/config.yaml",
                          o.kubelet_config)},
    {kSource, text_option("kubelet_state_dir", "DIR",
                          "Where cpu_manager_state and memory_manager_state are, e.g. /var/lib/kubelet",
                          o.kubelet_state_dir)},
    {kSource, path_option("podresources_socket", "FILE",
                          "The kubelet's PodResources API socket (\"\" to not ask it); without it, the state files are read",
                          o.podresources.socket)},
    {kSource, {"podresources_timeout", "DURATION", "Deadline of each PodResources call (retried twice with backoff)",
               format_seconds(to_seconds(o.podresources.deadline)),
               [&o](const std::string& t) { return set_milliseconds("podresources_timeout", t, o.podresources.deadline); }}}
  };
}

// How the node is planned, and named where it is published.
std::vector<Row> plan_rows(AgentOptions& o) {
  auto& p = o.updater.plan;
  return {
    {kPlan | kRun, {"fingerprint_method", "METHOD",
                    "Pods the NodeResourceTopology's pod-set fingerprint counts: " + publish::kFingerprintMethodNames.choices(),
                    std::string(publish::to_string(o.updater.fingerprint_method)),
                    [&o](const std::string& t) { return set_fingerprint_method(t, o.updater.fingerprint_method); }}},
    {kPlan, count_option("reserved_cores_per_node", "N", "Whole cores per NUMA node kept for the system (reservedSystemCPUs)",
                         p.reserved_cores_per_node)},
    {kPlan, quantity_option("kube_reserved_memory", "kubeReserved memory", p.kube_reserved_memory)},
    {kPlan, quantity_option("system_reserved_memory", "systemReserved memory", p.system_reserved_memory)},
    {kPlan, quantity_option("eviction_hard_memory", "evictionHard memory.available", p.eviction_hard_memory)},
    {kPlan | kFleet, fraction_option("pod_memory_fraction",
                                     "Share of a NUMA node's allocatable memory one replica requests",
                                     p.pod_memory_fraction)},
    {kPlan | kFleet, count_option("replicas_per_numa_node", "N",
                                  "Replicas sharing one NUMA node (cluster-plan: with --sizing per-class)",
                                  p.replicas_per_numa_node)},
    {kPlan | kRun, without_default(text_option("node_name", "NAME",
                                               "Kubernetes node name (NUMASERVE_NODE_NAME or NODE_NAME; default the "
                                               "host name)",
                                               o.updater.node_name))}
  };
}

// The DaemonSet's loop, endpoint and where it publishes.
std::vector<Row> run_rows(AgentOptions& o) {
  std::vector<Row> rows = {
    {kRun, duration_option("interval", "Rediscover this often (also on SIGHUP)", o.loop.interval)},
    {kRun, {"max_events_per_second", "N",
            "Most cycles a second that kubelet state changes trigger (inotify); --interval still runs",
            format_number(o.loop.max_events_per_second),
            [&o](const std::string& t) { return set_rate("max_events_per_second", t, o.loop.max_events_per_second); }}},
    {kRun, path_option("hints_dir", "DIR", "Where topology.json, plan.json, kubelet-config.yaml... are written",
                       o.updater.hints_dir)},
    {kRun, text_option("kubelet_dropin_dir", "DIR",
                       "Also write the kubelet drop-in here (opt-in; never restarts the kubelet)", o.kubelet_dropin_dir)},
    {kRun, switch_option("oneshot", "Run one cycle and exit (status 1 if it failed)", o.oneshot)},
    {kRun, switch_option("no_publish", "Discover and plan, but write nothing", o.no_publish)},
    {kRun, switch_option("no_apiserver", "Do not apply the NodeResourceTopology and labels even in a cluster",
                         o.no_apiserver)}
  };
  // The endpoint's and the API server's rows, shared with the operator.
  for (auto& spec : kube::http::endpoint_options(o.endpoint)) rows.push_back({kRun, std::move(spec)});
  for (auto& spec : kube::apiserver::connection_options(o.apiserver)) rows.push_back({kRun, std::move(spec)});
  return rows;
}

// What discover, plan and cluster-plan print.
std::vector<Row> output_rows(AgentOptions& o) {
  return {
    {kDiscover, switch_option("json", "discover: print JSON instead of text", o.json)},
    {kDiscover | kPlanOnly, text_option("svg", "FILE",
                                        "discover, plan: also draw the node (with plan: its reserved CPUs and "
                                        "replica slots) into this SVG file",
                                        o.svg)},
    {kPlanOnly | kFleet, output_option(o.output)}
  };
}

// cluster-plan's sizing of the fleet.
std::vector<Row> fleet_rows(AgentOptions& o) {
  return {
    {kFleet, {"sizing", "POLICY",
              "cluster-plan: per-class (each machine class its own replica size) or uniform (one size for the fleet)",
              std::string(kube::fleet::to_string(o.fleet.sizing)),
              [&o](const std::string& t) { return set_parsed("sizing", t, kube::fleet::parse_sizing, o.fleet.sizing); }}},
    {kFleet, {"hugepages_per_replica", "SIZES",
              "cluster-plan: hugepages each replica asks, e.g. hugepages-2Mi=1Gi (a NUMA zone holds as many as its "
              "hugepages cover)",
              "", [&o](const std::string& t) {
                return set_parsed("hugepages_per_replica", t, kube::fleet::parse_hugepages, o.fleet.hugepages_per_replica);
              }}},
    {kFleet, fraction_option("uniform_min_use",
                             "cluster-plan --sizing uniform: the least share of the planned nodes' CPUs at work",
                             o.fleet.uniform_min_use)}
  };
}

// Every option of the agent, once, with the groups that take it; --help
// and the README's table list them in this order.
std::vector<Row> agent_options(AgentOptions& o) {
  std::vector<Row> rows;
  for (auto* part : {&source_rows, &plan_rows, &run_rows, &output_rows, &fleet_rows}) {
    for (auto& row : part(o)) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

OptionTable table_for(AgentOptions& o, int groups) {
  std::vector<OptionSpec> specs;
  for (auto& row : agent_options(o)) {
    // A subcommand's own flags are not in config files or the environment;
    // a shared row (cluster-plan's share of the plan's) keeps them.
    if (!(row.groups & (kSource | kPlan | kRun))) row.spec.command_line_only = true;
    if (row.groups & groups) specs.push_back(std::move(row.spec));
  }
  if (groups & kRun) {
    for (auto& row : numaserve::log_options(o.log)) specs.push_back(std::move(row));
  }
  return numaserve::OptionTable(std::move(specs));
}

}  // namespace numaserve::agent::options
