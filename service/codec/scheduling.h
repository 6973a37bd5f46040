#pragma once
// A request's scheduling parameters as its protocol carries them, before
// the service checks them against its priority levels (api/service.h):
// /predict's and KServe v2's "parameters": {"priority": N, "timeout": us},
// v2 gRPC's int64 parameters of those names, Ranking.Predict's priority
// field (its timeout is the call's deadline).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace numaserve::codec {

struct Scheduling {
  std::optional<std::int64_t> priority;    // 1 is the highest; absent: the service's default level
  std::optional<std::int64_t> timeout_us;  // its own queue timeout, where its level allows one
  std::string_view priority_field = "parameters.priority";  // how a refusal names them
  std::string_view timeout_field = "parameters.timeout";
};

// An unsigned parameter (Triton's uint64_param, a JSON number past int64's
// range) as the int64 the checks read: past the range it stays out of
// every level's range, never wraps into it.
inline std::int64_t saturated(std::uint64_t value) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(value, std::numeric_limits<std::int64_t>::max()));
}

}  // namespace numaserve::codec
