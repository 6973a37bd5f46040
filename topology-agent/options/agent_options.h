#pragma once
// The agent's options: the values, and the one table that declares each of
// them for every subcommand (common/options.h). A library of its own so that
// the table's tests and the options file's fuzz target see the very table
// the binary uses.

#include <string>
#include <vector>

#include "discover/discover.h"
#include "numaserve/common/options.h"
#include "plan/plan.h"
#include "publish/fingerprint.h"

namespace numaserve::agent::options {

// The node's name as Kubernetes knows it: NODE_NAME from the downward API in
// the DaemonSet, else the host name (what the kubelet registers by default).
std::string default_node_name();

struct AgentOptions {
  std::string xml;
  std::string sysfs_root;
  std::string synthetic;
  std::string kubelet_config;
  std::string kubelet_state_dir;
  podresources::ClientConfig podresources;  // socket "" = do not ask the API
  publish::FingerprintMethod fingerprint_method = publish::FingerprintMethod::kWithExclusiveResources;
  plan::PlanConfig plan;
  std::string node_name = default_node_name();  // NODE_NAME, else the host name
  double interval_seconds = 60;
  double max_events_per_second = 1;
  std::string listen_address = "0.0.0.0";
  unsigned port = 9300;
  std::string hints_dir = "/var/lib/numaserve/hints";
  std::string kubelet_dropin_dir;
  bool oneshot = false;
  bool no_publish = false;
  std::string apiserver_url;
  std::string apiserver_ca_file;
  std::string apiserver_token_file;
  bool no_apiserver = false;
  LogOptions log;  // run's

  discover::DiscoverConfig discover_config() const {
    discover::DiscoverConfig out;
    if (!xml.empty()) out.source = TopologySource::xml(xml);
    if (!sysfs_root.empty()) out.source = TopologySource::sysfs(sysfs_root);
    if (!synthetic.empty()) out.source = TopologySource::synthetic(synthetic);
    if (!kubelet_config.empty()) out.kubelet_config = kubelet_config;
    if (!kubelet_state_dir.empty()) out.kubelet_state_dir = kubelet_state_dir;
    if (!podresources.socket.empty()) out.podresources = podresources;
    return out;
  }
};

// Which subcommands take a row: discover the sources, plan also the plan's
// settings, run everything.
enum Group { kSource = 1, kPlan = 2, kRun = 4 };

// The rows of `groups`, writing into `o`.
OptionTable table_for(AgentOptions& o, int groups);

}  // namespace numaserve::agent::options
