// numaserve-topology-agent: flags only; the work happens in numaserve::common
// (discovery) and the agent's parts (report).
#include <CLI/CLI.hpp>

#include <iostream>

#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"
#include "numaserve/common/topology_json.h"
#include "report/report.h"

namespace {

struct DiscoverOptions {
  std::string xml;
  std::string sysfs_root;
  std::string synthetic;
  bool json = false;
};

int run_discover(const DiscoverOptions& opt) {
  using numaserve::TopologySource;
  TopologySource source = TopologySource::live();
  if (!opt.xml.empty()) source = TopologySource::xml(opt.xml);
  if (!opt.sysfs_root.empty()) source = TopologySource::sysfs(opt.sysfs_root);
  if (!opt.synthetic.empty()) source = TopologySource::synthetic(opt.synthetic);

  auto topology = numaserve::discover_topology(source);
  if (!topology) {
    std::cerr << "numaserve-topology-agent: error: " << topology.error().message << "\n";
    return 1;
  }
  // The process placement is this process's own, so it belongs with the live
  // machine only; for a captured tree, Topology::allowed_* already say what
  // the captured cgroup allowed.
  std::optional<numaserve::Placement> placement;
  if (source.kind == TopologySource::Kind::kLive) {
    auto found = numaserve::discover_placement();
    if (!found) {
      std::cerr << "numaserve-topology-agent: error: " << found.error().message << "\n";
      return 1;
    }
    placement = *found;
  }
  const auto warnings = placement ? numaserve::check_placement(*placement, &*topology)
                                  : std::vector<std::string>{};
  if (opt.json) {
    nlohmann::json out = {{"topology", *topology},
                          {"placement", placement ? nlohmann::json(*placement) : nlohmann::json()},
                          {"warnings", warnings}};
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << numaserve::agent::report::render_text(*topology, placement, warnings);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"numaserve-topology-agent: NUMA topology of a Kubernetes node"};
  app.require_subcommand(1);

  DiscoverOptions discover;
  auto* cmd = app.add_subcommand("discover", "Print NUMA nodes, CPUs, cores, memory, distances and "
                                             "this process's placement");
  auto* xml = cmd->add_option("--xml", discover.xml, "Read an hwloc XML export instead of this machine")
                  ->check(CLI::ExistingFile);
  auto* sysfs = cmd->add_option("--sysfs-root", discover.sysfs_root,
                                "Read /sys and /proc under this directory (e.g. /host in a pod)")
                    ->check(CLI::ExistingDirectory);
  auto* synthetic = cmd->add_option("--synthetic", discover.synthetic,
                                    "An hwloc synthetic description, e.g. \"pack:2 numa:1 core:4 pu:2\"");
  xml->excludes(sysfs, synthetic);
  sysfs->excludes(synthetic);
  cmd->add_flag("--json", discover.json, "Print JSON instead of text");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any bad flag or value is a usage error (2), whatever
    // CLI11's internal code for it.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return run_discover(discover);
}
