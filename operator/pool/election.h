#pragma once
// Leader election on a coordination.k8s.io/v1 Lease, as client-go's: another
// holder's lease has expired when its record has not changed for its
// duration by this process's own clock (no trust in others' clocks).

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace numaserve::op::pool {

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

}  // namespace numaserve::op::pool
