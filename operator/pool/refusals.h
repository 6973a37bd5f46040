#pragma once
// Pods the kubelet refused at admission, and when the operator may delete
// one again on a node: the external control loop the Topology Manager's
// documentation asks for, with a backoff per node so that a node refusing
// again and again is reported, not hammered.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace numaserve::op::pool {

// The kubelet refused the pod at admission: Failed with TopologyAffinityError,
// OutOfcpu, OutOfmemory, SMTAlignmentError or another OutOf<resource>.
bool refused_at_admission(const nlohmann::json& pod);

// Each node on its own backoff (doubling from `first` to `most`); a node's
// count is forgotten after `forget` without a refusal. The clock is the
// caller's (tests drive it).
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

}  // namespace numaserve::op::pool
