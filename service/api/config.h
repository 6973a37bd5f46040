#pragma once
// What the service is told at start, apart from what it finds: request
// limits, batching, warm-up. Header-only, so the options table (options/)
// builds its rows on these very defaults.

#include <cstddef>
#include <string>

#include "batching/batcher.h"

namespace numaserve::api {

// What one /predict may carry; beyond, a 400 naming the limit.
struct RequestLimits {
  std::size_t max_items = 2000;
  std::size_t max_features_per_entity = 256;
  std::size_t max_list_length = 1024;
};

struct ServiceConfig {
  RequestLimits limits;
  batching::BatcherConfig batching;  // workers come from the plan
  unsigned warmup_rounds = 3;
  std::size_t warmup_rows = 64;
  std::string version;  // numaserve's, for GET /v2
  // Under the supervisor: stay not ready after warm-up until the group
  // opens, so replicas sharing one port turn ready together.
  bool wait_for_group = false;
};

}  // namespace numaserve::api
