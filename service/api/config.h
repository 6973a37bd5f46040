#pragma once
// What the service is told at start, apart from what it finds: request
// limits, batching, warm-up. Header-only and torch-free, so the options
// table (options/) builds its rows on these very defaults.

#include <cstddef>
#include <string>

#include "batching/batcher.h"
#include "http/predict.h"

namespace numaserve::api {

struct ServiceConfig {
  http::RequestLimits limits;
  batching::BatcherConfig batching;  // workers come from the plan
  unsigned warmup_rounds = 3;
  std::size_t warmup_rows = 64;
  std::string version;  // numaserve's, for GET /v2
  // Under the supervisor: stay not ready after warm-up until open_group(),
  // so a group sharing one port turns ready together.
  bool wait_for_group = false;
  // With a networked store: each worker keeps the items it fetched,
  // extracted, this long (0: always fetched), at most this many rows per model.
  double item_cache_ttl_seconds = 60;
  std::size_t item_cache_rows = 1u << 18;
};

}  // namespace numaserve::api
