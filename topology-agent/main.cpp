// numaserve-topology-agent: parses and dispatches. Options are declared
// once, in agent_options(); the work happens in numaserve::common and the
// agent's parts: discover, plan, publish (its renderings), report, fleet
// (cluster-plan) and serve's run_daemon (the DaemonSet: endpoint + the
// updater's loop). The topology operator is its own program (operator/).
#include <CLI/CLI.hpp>

#include <iostream>
#include <iterator>
#include <sstream>

#include "discover/discover.h"
#include "fleet/fleet.h"
#include "numaserve/common/log.h"
#include "numaserve/common/options.h"
#include "numaserve/common/text_file.h"
#include "options/agent_options.h"
#include "plan/plan.h"
#include "publish/files.h"
#include "publish/renderings.h"
#include "publish/yaml.h"
#include "report/report.h"
#include "serve/daemon.h"

namespace {

namespace discover = numaserve::agent::discover;
namespace plan = numaserve::agent::plan;
namespace kube = numaserve::kube;
namespace publish = numaserve::agent::publish;
namespace opts = numaserve::agent::options;  // the option groups: opts::kRun...
using numaserve::agent::options::AgentOptions;
using numaserve::agent::options::table_for;

constexpr const char* kProgram = "numaserve-topology-agent";

int fail(const std::string& message) {
  std::cerr << kProgram << ": error: " << message << "\n";
  return 1;
}

// Writes the node's picture when --svg asked for one.
int write_svg(const AgentOptions& o, const discover::NodeReport& report, const std::optional<plan::NodePlan>& plan) {
  if (o.svg.empty()) return 0;
  const std::filesystem::path file(o.svg);
  const publish::RenderInput input{report, plan, o.updater.node_name, o.updater.fingerprint_method};
  auto written = publish::write_if_changed(file.has_parent_path() ? file.parent_path() : ".", file.filename().string(),
                                           publish::find_rendering("svg")->render(input));
  return written ? 0 : fail(written.error().message);
}

int run_discover(const AgentOptions& o) {
  auto report = discover::discover_node(o.discover_config());
  if (!report) return fail(report.error().message);
  if (int rc = write_svg(o, *report, std::nullopt); rc != 0) return rc;
  std::cout << (o.json ? nlohmann::json(*report).dump(2) + "\n" : numaserve::agent::report::render_text(*report));
  return 0;
}

// Renderings that need no plan (the NodeResourceTopology, the labels)
// describe the machine with or without one, as the agent publishes them.
int run_plan(const AgentOptions& o) {
  auto report = discover::discover_node(o.discover_config());
  if (!report) return fail(report.error().message);
  std::optional<plan::NodePlan> planned;
  auto result = plan::plan_node(report->topology, o.updater.plan);
  if (result) planned = std::move(*result);
  const publish::Rendering& rendering = *publish::find_rendering(o.output);
  const publish::RenderInput input{*report, planned, o.updater.node_name, o.updater.fingerprint_method};
  if (!rendering.needs_plan) std::cout << rendering.render(input);
  if (!planned) return fail(result.error().message);
  if (int rc = write_svg(o, *report, planned); rc != 0) return rc;
  if (rendering.needs_plan) std::cout << rendering.render(input);
  return 0;
}

// The fleet's objects from files ("-" or none: standard input), planned.
int run_cluster_plan(AgentOptions& o, const std::vector<std::string>& files) {
  if (o.output != "text" && o.output != "json" && o.output != "yaml" && o.output != "helm-values") {
    std::cerr << kProgram << ": cluster-plan: -o " << o.output << ": want text, json, yaml or helm-values\n";
    return 2;
  }
  std::vector<std::vector<kube::fleet::FleetNode>> sources;
  for (const std::string& file : files.empty() ? std::vector<std::string>{"-"} : files) {
    auto text = file == "-" ? numaserve::Result<std::string>(std::string(std::istreambuf_iterator<char>(std::cin), {}))
                            : numaserve::read_text_file(file);
    if (!text) return fail(text.error().message);
    auto nodes = kube::fleet::read_objects(*text, file == "-" ? "<stdin>" : file);
    if (!nodes) return fail(nodes.error().message);
    sources.push_back(std::move(*nodes));
  }
  o.fleet.replicas_per_numa_node = o.updater.plan.replicas_per_numa_node;
  o.fleet.pod_memory_fraction = o.updater.plan.pod_memory_fraction;
  auto planned = kube::fleet::plan_fleet(kube::fleet::merge(std::move(sources)), o.fleet);
  if (!planned) return fail(planned.error().message);
  if (o.output == "text") {
    std::cout << kube::fleet::render_text(*planned);
  } else if (o.output == "json") {
    std::cout << nlohmann::json(*planned).dump(2) << "\n";
  } else if (o.output == "yaml") {
    std::cout << publish::to_yaml(nlohmann::json(*planned));
  } else {
    // The text plan above the values, for whoever reviews the change.
    std::cout << "# Written by numaserve-topology-agent cluster-plan for charts/numaserve:\n"
                 "# one Deployment per machine class (nodes labelled numaserve.io/machine-class).\n";
    std::istringstream text(kube::fleet::render_text(*planned));
    for (std::string line; std::getline(text, line);) std::cout << "#   " << line << "\n";
    std::cout << publish::to_yaml(kube::fleet::helm_values(*planned));
  }
  return 0;
}

// A subcommand and the options it takes. Built in place and never moved:
// the table binds its rows to the subcommand by address.
struct Command {
  Command(CLI::App& app, const char* name, const char* help, AgentOptions& o, int groups)
      : cli(app.add_subcommand(name, help)), table(table_for(o, groups)) {
    table.add_to(*cli);
  }
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  bool parsed() const { return cli->parsed(); }

  CLI::App* cli;
  numaserve::OptionTable table;
};

// The command line: every subcommand with its options.
struct CommandLine {
  explicit CommandLine(AgentOptions& o)
      : discover(app, "discover",
                 "Print NUMA nodes, CPUs, cores, memory, distances, kernel and kubelet settings, and this process's "
                 "placement",
                 o, opts::kSource | opts::kDiscover),
        plan(app, "plan",
             "Kubelet CPU/Memory/Topology Manager settings and the pod size that fits one replica on each NUMA node", o,
             opts::kSource | opts::kPlan | opts::kPlanOnly),
        run(app, "run",
            "The DaemonSet agent: discover, plan and publish on an interval; serve /topology, /plan, /metrics, /healthz",
            o, opts::kSource | opts::kPlan | opts::kRun),
        cluster_plan(app, "cluster-plan",
                     "Machine classes and replica sizes for a whole fleet, from `kubectl get "
                     "noderesourcetopologies,nodes -o yaml`",
                     o, opts::kFleet),
        options(app.add_subcommand("options", "Print every option as a Markdown table (for the README)")) {
    app.require_subcommand(1);
    cluster_plan.cli->add_option("files", fleet_files,
                                 "YAML files of Node and NodeResourceTopology objects (default: stdin)");
  }

  // The parsed subcommand that takes options (all but `options`).
  Command& parsed() {
    for (Command* c : {&discover, &plan, &cluster_plan}) {
      if (c->parsed()) return *c;
    }
    return run;
  }

  CLI::App app{"numaserve-topology-agent: NUMA topology of a Kubernetes node, and how to use it"};
  Command discover, plan, run, cluster_plan;
  CLI::App* options;
  std::vector<std::string> fleet_files;
};

}  // namespace

int main(int argc, char** argv) {
  AgentOptions options;
  CommandLine command_line(options);
  try {
    command_line.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any bad flag or value is a usage error (2), whatever
    // CLI11's internal code for it.
    return command_line.app.exit(e) == 0 ? 0 : 2;
  }
  if (command_line.options->parsed()) {
    std::cout << table_for(options, opts::kAllGroups).markdown();
    return 0;
  }
  if (auto applied = command_line.parsed().table.apply(); !applied) {
    std::cerr << kProgram << ": " << applied.error().message << "\n";
    return 2;
  }
  if ((!options.xml.empty()) + (!options.sysfs_root.empty()) + (!options.synthetic.empty()) > 1) {
    std::cerr << kProgram << ": --xml, --sysfs-root and --synthetic exclude each other\n";
    return 2;
  }
  if (command_line.cluster_plan.parsed()) return run_cluster_plan(options, command_line.fleet_files);
  if (command_line.discover.parsed()) return run_discover(options);
  if (command_line.plan.parsed()) return run_plan(options);
  numaserve::configure_logging("agent", options.log.level, options.log.format);
  return numaserve::agent::serve::run_daemon(
      {options.updater_config(), options.loop, options.endpoint, options.oneshot});
}
