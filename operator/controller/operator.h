#pragma once
// One operator replica's state and its steps, for run_operator's loop: a
// step of the leader election, a pass over every pool, the Lease handed
// over at shutdown, and what /plan and /metrics serve. Every write is a
// Status; a replica that stopped leading mid-pass writes nothing more.

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/controller.h"
#include "pool/election.h"
#include "pool/pool.h"
#include "pool/refusals.h"
#include "pool/status.h"

namespace numaserve::op::controller {

class Operator {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Operator(const OperatorConfig& config);

  // One step of the leader election; true while this process leads.
  bool lead();
  // Hands the Lease over at once on shutdown (client-go's ReleaseOnCancel).
  void release();
  // Lists the pools, Nodes and NodeResourceTopology objects and reconciles each pool.
  void reconcile_all();
  http::Snapshot snapshot() const;

 private:
  // The pool's live Deployments, PDBs, Services and HTTPRoute: "<collection>/<name>" -> object.
  using Live = std::map<std::string, nlohmann::json>;

  bool lost(const std::string& why);
  Status acting();
  void fault(const std::string& why);
  void failed(pool::PassReport& pass, const std::string& why, const char* reason);
  // A list reply; `missing_is_empty`: a 404 (a kind the cluster lacks) as no items.
  Result<nlohmann::json> list(const std::string& path, bool missing_is_empty = false);
  std::string leases() const;

  nlohmann::json reconcile(const nlohmann::json& object, const nlohmann::json& nodes, const nlohmann::json& nrts);
  Result<Live> live_objects(const pool::PoolSpec& pool, const std::string& selector);
  Status apply_desired(const std::vector<nlohmann::json>& desired, const Live& live, const std::string& ns,
                       pool::PassReport& pass);
  Status delete_unwanted(const Live& live, const std::set<std::string>& wanted, pool::PassReport& pass);
  Status delete_refused(const pool::PoolSpec& pool, const std::string& selector);
  nlohmann::json report(const nlohmann::json& object, const pool::PoolSpec* pool, const pool::fleet::FleetPlan* plan,
                        const pool::PassReport& pass);
  Status write_status(const pool::PoolSpec& pool, const nlohmann::json& status);
  std::string metrics() const;

  struct Counters {
    std::uint64_t reconciles = 0, errors = 0, applied = 0, unchanged = 0, deleted = 0, status_writes = 0;
    std::uint64_t lease_transitions = 0;
    bool leader = false;
  };

  OperatorConfig config_;
  apiserver::ApiServer api_;
  pool::LeaderElection election_;
  pool::Refusals refusals_;
  Counters counters_;
  std::string plans_;
  Clock::time_point renewed_at_{};
};

}  // namespace numaserve::op::controller
