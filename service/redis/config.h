#pragma once
// The Redis client's settings, header-only, so the options table builds its
// rows on these very defaults without linking hiredis.

#include <cstddef>

namespace numaserve::redis {

struct ClientConfig {
  double timeout_seconds = 0.010;   // a pipeline's deadline
  // The breaker opens after this many failures in a row and then refuses
  // at once for `breaker_open_seconds`, after which one pipeline probes.
  unsigned breaker_failures = 5;
  double breaker_open_seconds = 1;
  // Reconnecting waits from the first to the last, doubling.
  double reconnect_first_seconds = 0.05;
  double reconnect_last_seconds = 2;
  double connect_timeout_seconds = 1;  // a connection (and its AUTH, SELECT) not up by then is dialled again
  // Waiting this long without a single reply, the connection is taken for
  // hung (a partition sends no FIN) and dialled again.
  double stall_seconds = 2;
  // Pipelines sent and not yet answered; beyond, refuse at once (a Redis
  // that stopped reading must not grow our memory without bound).
  std::size_t max_in_flight = 256;
};

}  // namespace numaserve::redis
