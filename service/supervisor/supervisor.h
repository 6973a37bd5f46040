#pragma once
// Outside Kubernetes, the fast layout one flag away: `numaserve serve
// --replicas-per-numa-node N` runs a small supervisor that starts one replica
// process per NUMA node (N per node) inside its own allowed cpuset, each
// pinned to that node's CPUs with memory bound to that node before the model
// loads, all serving one port through SO_REUSEPORT. It restarts a replica
// that dies (backoff, and a limit), forwards SIGTERM so every replica drains,
// and opens the group for traffic only when every replica is warm, so a load
// balancer never sees a port that answers from a cold replica.
//
// Planning the replicas is pure; running them is the thin acting part.

#include <optional>
#include <string>
#include <vector>

#include "numaserve/common/placement.h"
#include "numaserve/common/topology.h"

namespace numaserve::supervisor {

enum class Bind { kNuma, kNone };

struct ReplicaConfig {
  unsigned per_numa_node = 0;  // --replicas-per-numa-node
  unsigned replicas = 0;  // --replicas (with kNuma: spread evenly over the nodes)
  Bind bind = Bind::kNuma;
};

// One replica process: where it runs and where its memory goes.
struct Replica {
  unsigned index = 0;
  std::optional<unsigned> node;  // kNuma: the node it is bound to
  CpuSet cpus;
  NodeSet mems;
  std::string name() const;  // "replica-1 (node 1)"
};

// Nodes are those with CPUs in the allowed cpuset; a node's CPUs are split
// into whole cores among its replicas. Errors name the numbers: "3 replicas
// per node need 3 cores, node 1 has 2 allowed (CPUs 2-3)".
Result<std::vector<Replica>> plan_replicas(const Placement& placement, const Topology& topology,
                                           const ReplicaConfig& config);

struct SupervisorConfig {
  std::vector<std::string> command;  // how to start a replica: numaserve and its serve arguments
  unsigned max_restarts = 5;         // per replica within restart_window_seconds; then give up
  double restart_window_seconds = 300;
  double grace_seconds = 35;         // after SIGTERM, then SIGKILL
};

// Starts the replicas and supervises them until SIGTERM/SIGINT (exit 0 when
// every replica drained cleanly) or a replica fails too often (exit 1).
// The supervisor re-executes the same binary, so a replica learns who it is
// from the environment: NUMASERVE_REPLICA (its name), NUMASERVE_READY_FD.
int run(const std::vector<Replica>& replicas, const SupervisorConfig& config);

// The replica's half of the protocol: tell the supervisor this replica is
// warm (no-op when not supervised). The supervisor answers with SIGUSR1 once
// the whole group is; an unsupervised process is its own group.
bool supervised();
void report_ready();
// This replica's name, "replica-1 (node 1)", for logs and /placement; empty
// when not supervised.
std::string replica_name();

}  // namespace numaserve::supervisor
