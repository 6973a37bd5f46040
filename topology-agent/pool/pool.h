#pragma once
// The operator's decisions, pure: what a ServingPool (numaserve.io/v1alpha1)
// asks for, the Deployments and PodDisruptionBudgets that serve it on the
// fleet the API server describes (one per machine class, sized by the same
// plan_fleet() as `cluster-plan`), whether a live object already is what it
// should be, the pool's status, which pods the kubelet refused at admission
// and when one may be deleted again on a node, and the leader election's
// next step. pool/controller.h does the talking.

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/fleet.h"
#include "numaserve/common/result.h"

namespace numaserve::agent::pool {

inline constexpr const char* kFieldManager = "numaserve-operator";
inline constexpr const char* kApiVersion = "numaserve.io/v1alpha1";
inline constexpr const char* kPoolLabel = "numaserve.io/pool";
inline constexpr const char* kClassLabel = fleet::label::kMachineClass;

// A field of a document from the API server by its path, or null when a
// step is missing or not an object: the operator trusts no shape it was
// sent (a field of another type must not throw).
const nlohmann::json& field(const nlohmann::json& j, std::initializer_list<std::string_view> path);
// The same, "" unless a string; 0 unless an integer.
std::string text_field(const nlohmann::json& j, std::initializer_list<std::string_view> path);
std::int64_t integer_field(const nlohmann::json& j, std::initializer_list<std::string_view> path);

struct PoolSpec {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::int64_t generation = 0;
  nlohmann::json pod_template;  // spec.template: the service's PodTemplateSpec
  std::string container;        // the container sized per class ("" = the first)
  fleet::FleetConfig sizing;
  unsigned headroom = 0;                  // NUMA slots left free per class
  nlohmann::json max_unavailable = 1;     // per class: rollouts and the PDB
  std::map<std::string, std::string> node_selector;  // the pool's nodes; empty: every node
};

// From the ServingPool object as the API server returns it. The CRD's schema
// already refused most mistakes; what it cannot check is named by field.
Result<PoolSpec> parse_pool(const nlohmann::json& object);

// The pool's fleet: the Node and NodeResourceTopology list replies (items
// without kind, as the API server sends them), nodes outside the pool's
// node selector left out.
Result<std::vector<fleet::FleetNode>> fleet_of(const nlohmann::json& node_list, const nlohmann::json& nrt_list,
                                               const std::map<std::string, std::string>& node_selector);

// One Deployment and one PodDisruptionBudget per class, named
// <pool>-<class>, labelled with the pool and the class, owned by the pool.
std::vector<nlohmann::json> desired_objects(const PoolSpec& pool, const fleet::FleetPlan& plan);

// Whether `live` already holds every field of `desired` (what an apply of
// `desired` would set): objects by key, lists element by element, and
// empty maps, lists or nulls in `desired` match absent fields (the API
// server drops them). Fields the server or others added are not compared.
bool contains(const nlohmann::json& live, const nlohmann::json& desired);
// The first field where it does not, as a JSON pointer ("" when it does):
// what the operator logs as the reason it applies.
std::string first_difference(const nlohmann::json& live, const nlohmann::json& desired);

// The kubelet refused the pod at admission: Failed with TopologyAffinityError,
// OutOfcpu, OutOfmemory, SMTAlignmentError or another OutOf<resource>.
bool refused_at_admission(const nlohmann::json& pod);

// Deleting refused pods, each node on its own backoff (doubling from
// `first` to `most`), so that a node that refuses again and again is
// reported, not hammered. A node's count is forgotten after `forget` without a
// refusal. The clock is the caller's (tests drive it).
class Refusals {
 public:
  using Clock = std::chrono::steady_clock;
  struct Node {
    unsigned refusals = 0;  // deleted pods, since the node last went quiet
    std::string last_reason;
    Clock::time_point next_delete{};
    Clock::time_point last{};
  };
  Refusals(Clock::duration first = std::chrono::seconds(1), Clock::duration most = std::chrono::minutes(5),
           Clock::duration forget = std::chrono::minutes(10))
      : first_(first), most_(most), forget_(forget) {}

  // Whether a refused pod on `node` may be deleted now; if so, counted.
  bool admit_delete(const std::string& node, const std::string& reason, Clock::time_point now);
  // Nodes that refused at least `at_least` pods, by name.
  std::map<std::string, Node> repeated(unsigned at_least, Clock::time_point now) const;
  std::uint64_t deleted() const { return deleted_; }
  std::uint64_t deferred() const { return deferred_; }

 private:
  Clock::duration first_, most_, forget_;
  std::map<std::string, Node> nodes_;
  std::uint64_t deleted_ = 0, deferred_ = 0;
};

// What the status reports of one class's Deployment as the API server has it.
struct ClassState {
  std::int64_t ready_replicas = 0;
};

// The pool's status subresource: per class its nodes, desired and ready
// replicas, the replica's size; unplanned nodes; refused pods; a Ready
// condition (its lastTransitionTime kept from `previous` while its status
// is unchanged); the last error.
nlohmann::json pool_status(const PoolSpec& pool, const fleet::FleetPlan* plan,
                           const std::map<std::string, ClassState>& classes, const Refusals& refusals,
                           const std::string& error, const nlohmann::json& previous, const std::string& now,
                           Refusals::Clock::time_point steady_now);

// Leader election on a coordination.k8s.io/v1 Lease, as client-go's: another
// holder's lease has expired when its record has not changed for its
// duration by this process's own clock (no trust in others' clocks).
class LeaderElection {
 public:
  using Clock = std::chrono::steady_clock;
  LeaderElection(std::string identity, std::string namespace_name, std::string name, unsigned duration_seconds)
      : identity_(std::move(identity)), namespace_(std::move(namespace_name)), name_(std::move(name)),
        duration_seconds_(duration_seconds) {}

  // Given the Lease as read (null: none exists), the Lease to write (POST
  // when none exists, else PUT with its resourceVersion), or nullopt when
  // another holder's lease is still current.
  std::optional<nlohmann::json> next(const nlohmann::json& lease, Clock::time_point now, const std::string& wall_now);
  const std::string& identity() const { return identity_; }
  const std::string& name() const { return name_; }
  unsigned duration_seconds() const { return duration_seconds_; }

 private:
  std::string identity_, namespace_, name_;
  unsigned duration_seconds_;
  std::string observed_record_;  // the other holder's spec, as last seen
  Clock::time_point observed_at_{};
};

}  // namespace numaserve::agent::pool
