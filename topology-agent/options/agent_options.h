#pragma once
// The agent's options: the values, and the one table that declares each of
// them for every subcommand (common/options.h). Each value lives in the
// config struct of the part that uses it (the plan's, the updater's, its
// loop's, the endpoint's, the PodResources client's), so its default is
// written once, there, and the rows show it. A library of its own so that
// the table's tests and the options file's fuzz target see the very table
// the binary uses.

#include <optional>
#include <string>
#include <vector>

#include "apiserver/apiserver.h"
#include "discover/discover.h"
#include "fleet/fleet.h"
#include "http/http.h"
#include "numaserve/common/options.h"
#include "updater/loop.h"
#include "updater/updater.h"

namespace numaserve::agent::options {

// The node's name as Kubernetes knows it: NODE_NAME from the downward API in
// the DaemonSet, else the host name (what the kubelet registers by default).
std::string default_node_name();

struct AgentOptions {
  AgentOptions() { updater.node_name = default_node_name(); }

  // Where the machine is read from: at most one of these, else this machine.
  std::string xml;
  std::string sysfs_root;
  std::string synthetic;
  std::string kubelet_config;
  std::string kubelet_state_dir;
  podresources::ClientConfig podresources;  // socket "" = do not ask the API
  // What run does; discover and plan use its plan and fingerprint method.
  updater::UpdaterConfig updater;  // discover, publish and apiserver are filled from the rows below
  updater::LoopConfig loop;
  kube::http::EndpointConfig endpoint;
  std::string kubelet_dropin_dir;
  bool oneshot = false;
  bool no_publish = false;
  kube::apiserver::Connection apiserver;
  bool no_apiserver = false;
  LogOptions log;  // run's
  // The subcommands' own flags.
  bool json = false;            // discover
  std::string svg;              // discover, plan
  std::string output = "text";  // plan -o: a rendering's name (publish/renderings.h); cluster-plan -o
  kube::fleet::FleetConfig fleet;     // cluster-plan; replicas per NUMA node and memory share from the plan's rows

  discover::DiscoverConfig discover_config() const;
  // The updater's whole config: the rows' values, the API server's from the
  // pod's service account unless told otherwise (none outside a cluster).
  updater::UpdaterConfig updater_config() const;
};

// Which subcommands take a row: discover the sources, plan also the plan's
// settings, run everything; kDiscover, kPlanOnly and kFleet rows are those
// subcommands' own flags (kFleet: cluster-plan's).
enum Group { kSource = 1, kPlan = 2, kRun = 4, kDiscover = 8, kPlanOnly = 16, kFleet = 32 };
inline constexpr int kAllGroups = kSource | kPlan | kRun | kDiscover | kPlanOnly | kFleet;

// The rows of `groups`, writing into `o`.
OptionTable table_for(AgentOptions& o, int groups);

}  // namespace numaserve::agent::options
