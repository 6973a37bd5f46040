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
  kube::http::Snapshot snapshot() const;

 private:
  // The pool's live Deployments, PDBs, Services and HTTPRoute: "<collection>/<name>" -> object.
  using Live = std::map<std::string, nlohmann::json>;

  // The API server's answer, as a Status: not 2xx (nor, where `missing_ok`,
  // 404) is kUnavailable, counted by its HTTP status (0: no answer).
  Status checked(const Result<kube::apiserver::Reply>& reply, const std::string& what, bool missing_ok = false);
  // The NodeResourceTopology list to plan from: the one read, plus for each
  // Node whose object has gone since (its agent restarting, the object
  // deleted and not yet written again) the last one read of it.
  nlohmann::json with_remembered(const nlohmann::json& nodes, const nlohmann::json& nrts);
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
  Status delete_unwanted(const Live& live, const std::set<std::string>& wanted, const std::set<std::string>& held,
                        pool::PassReport& pass);
  Status delete_refused(const pool::PoolSpec& pool, const std::string& selector);
  nlohmann::json report(const nlohmann::json& object, const pool::PoolSpec* pool, const kube::fleet::FleetPlan* plan,
                        const pool::PassReport& pass);
  Status write_status(const pool::PoolSpec& pool, const nlohmann::json& status);
  std::string metrics() const;

  struct Counters {
    std::uint64_t reconciles = 0, errors = 0, applied = 0, unchanged = 0, deleted = 0, held = 0, status_writes = 0;
    std::uint64_t lease_transitions = 0;
    bool leader = false;
    std::map<int, std::uint64_t> failed_replies;  // by HTTP status; 0: no answer
    std::uint64_t last_success = 0;               // Unix time (s) of the last pass without an error
  };

  OperatorConfig config_;
  kube::apiserver::ApiServer api_;
  pool::LeaderElection election_;
  pool::Refusals refusals_;
  Counters counters_;
  std::string plans_;
  // Each Node's last NodeResourceTopology read, while the Node exists.
  std::map<std::string, nlohmann::json> topologies_;
  std::set<std::string> remembered_;  // the Nodes planned from topologies_ in the last pass
  bool pass_failed_ = false;
  Clock::time_point renewed_at_{};
};

}  // namespace numaserve::op::controller
