#pragma once
// The feature store's settings, header-only, so the options table builds
// its rows on these very defaults without linking hiredis or protobuf.

#include <cstddef>

#include "redis/config.h"

namespace numaserve::feature_store {

// With Feast's Redis online store.
struct StoreConfig {
  redis::ClientConfig client;
  // On a timeout, refusal, lost connection, open breaker or unreadable
  // value: false answers with the model's defaults for what is missing (and
  // counts it); true refuses the request with 503 and Retry-After.
  bool fail_on_error = false;
  double max_age_seconds = 0;  // values older than this count as missing; 0: any age
  // Each worker keeps the items it fetched, extracted, this long (0: always
  // fetched), at most this many rows per model.
  double item_cache_ttl_seconds = 60;
  std::size_t item_cache_rows = 1u << 18;
};

}  // namespace numaserve::feature_store
