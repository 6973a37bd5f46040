#include "pool/refusals.h"

#include <algorithm>

#include "pool/fields.h"

namespace numaserve::op::pool {

bool refused_at_admission(const nlohmann::json& pod) {
  if (text_field(pod, {"status", "phase"}) != "Failed") return false;
  const std::string reason = text_field(pod, {"status", "reason"});
  return reason == "TopologyAffinityError" || reason == "SMTAlignmentError" || reason == "UnexpectedAdmissionError" ||
         reason.rfind("OutOf", 0) == 0;
}

bool Refusals::admit_delete(const std::string& node, const std::string& reason, Clock::time_point now) {
  Node& n = nodes_[node];
  if (n.refusals > 0 && now - n.last > forget_) n = Node{};
  if (n.refusals > 0 && now < n.next_delete) {
    ++deferred_;
    return false;
  }
  ++n.refusals;
  ++deleted_;
  n.last_reason = reason;
  n.last = now;
  Clock::duration wait = first_;
  for (unsigned i = 1; i < n.refusals && wait < most_; ++i) wait *= 2;
  n.next_delete = now + std::min(wait, most_);
  return true;
}

std::map<std::string, Refusals::Node> Refusals::repeated(unsigned at_least, Clock::time_point now) const {
  std::map<std::string, Node> out;
  for (const auto& [name, n] : nodes_) {
    if (n.refusals >= at_least && now - n.last <= forget_) out[name] = n;
  }
  return out;
}

}  // namespace numaserve::op::pool
