#pragma once
// A networked store's counters in the shape /metrics renders them: plain
// structs, so metrics/ reads them without the stores' code (hiredis,
// protobuf).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace numaserve::feature_store {

// A networked store's counters, read at scrape time from any thread.
struct StoreStats {
  std::string store;  // where, without secrets
  std::vector<std::pair<std::string, std::uint64_t>> errors;  // by kind
  std::uint64_t degraded = 0;  // requests answered with defaults for what failed
  std::uint64_t cache_hits = 0;    // items found in a worker's item cache
  std::uint64_t cache_misses = 0;  // items asked of the store
  std::vector<std::string> breakers;  // per worker: closed, open, half_open
  std::vector<bool> connected;        // per worker (a cluster: to every master)
  // A Redis Cluster's masters, summed over the workers.
  struct Node {
    std::string node;  // host:port
    std::uint64_t pipelines = 0, errors = 0, moved = 0, ask = 0, refreshes = 0;
  };
  std::vector<Node> nodes;
};

}  // namespace numaserve::feature_store
