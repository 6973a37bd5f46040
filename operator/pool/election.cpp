#include "pool/election.h"

#include "pool/fields.h"

namespace numaserve::op::pool {

using nlohmann::json;

std::optional<json> LeaderElection::next(const json& lease, Clock::time_point now, const std::string& wall_now) {
  const json spec_for_me = {{"holderIdentity", identity_},
                            {"leaseDurationSeconds", duration_seconds_},
                            {"renewTime", wall_now}};
  if (!lease.is_null() && !lease.is_object()) return std::nullopt;  // not a Lease: wait for one
  if (lease.is_null()) {
    observed_record_.clear();
    json l = {{"apiVersion", "coordination.k8s.io/v1"},
              {"kind", "Lease"},
              {"metadata", {{"name", name_}, {"namespace", namespace_}}},
              {"spec", spec_for_me}};
    l["spec"]["acquireTime"] = wall_now;
    l["spec"]["leaseTransitions"] = 0;
    return l;
  }
  const json spec = field(lease, {"spec"}).is_object() ? lease["spec"] : json::object();
  const std::string holder = text_field(spec, {"holderIdentity"});
  json l = lease;
  if (holder == identity_) {  // renew
    l["spec"]["renewTime"] = wall_now;
    l["spec"]["leaseDurationSeconds"] = duration_seconds_;
    return l;
  }
  const std::string record = spec.dump();
  if (record != observed_record_) {  // the holder renewed (or changed) since we last looked
    observed_record_ = record;
    observed_at_ = now;
  }
  const std::int64_t given = integer_field(spec, {"leaseDurationSeconds"});
  const unsigned duration = given > 0 && given < 3600 ? static_cast<unsigned>(given) : duration_seconds_;
  if (!holder.empty() && now - observed_at_ < std::chrono::seconds(duration)) return std::nullopt;
  l["spec"] = spec_for_me;
  l["spec"]["acquireTime"] = wall_now;
  l["spec"]["leaseTransitions"] = integer_field(spec, {"leaseTransitions"}) + 1;
  return l;
}

}  // namespace numaserve::op::pool
