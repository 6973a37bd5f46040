#pragma once
// `numaserve-bench load`'s priority levels: each /predict body's
// "parameters" (--priority, --timeout-us), and a mix of levels at their own
// rates in one open loop (--mix "1:120,2:450"), each level's answers
// reported apart — the load bench/overload.sh offers one replica.

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen.h"
#include "numaserve/common/result.h"

namespace numaserve::bench {

struct LevelOptions {
  std::size_t priority = 0;  // 0: none named (the server's default)
  long long timeout_us = -1;  // -1: none
  std::string mix;            // "LEVEL:RATE,..."
  bool unnamed = false;       // a mix's levels reported apart but not named in the bodies (a server without levels)
};

// Rewrites `bodies` (/predict JSON) for `o` and, with a mix, sets the open
// loop's rate and each body's class (its level) in `config`. The bodies
// are repeated as the mix needs; their order interleaves the levels evenly.
Status apply_levels(const LevelOptions& o, std::vector<std::string>& bodies, LoadConfig& config);

// Per level of a mix: answered (200), refused (503), other; the 200s' and
// the 503s' p50/p99 in ms.
nlohmann::json by_level(const LoadResult& result);

}  // namespace numaserve::bench
