#pragma once
// An HTTP (and gRPC) load generator for POST bodies against one URL.
//   closed loop: `connections` clients, each sends its next request when the
//                previous is answered — finds saturation throughput.
//   open loop:   requests are due at a constant `rate`, whether or not the
//                server keeps up; latency counts from when a request was due,
//                so a stalled server cannot hide its queue (no coordinated
//                omission). One busy-polling thread sends each request when
//                it is due on a free one of `connections` connections.

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace numaserve::bench {

struct LoadConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string path = "/predict";
  std::vector<std::string> bodies;  // sent round-robin
  std::string content_type = "application/json";
  // With each body (by index), one more header field: Triton's
  // Inference-Header-Content-Length for binary tensor data. Empty: none.
  std::vector<std::pair<std::string, std::string>> body_headers;
  std::size_t connections = 4;
  double rate = 0;  // requests/s; 0: closed loop
  double warmup_seconds = 2;
  double seconds = 10;
  // Open loop: this fraction of the connections closed and opened anew each
  // second (idle ones, in turn), and any the server closed opened again, as
  // a fleet of clients that come and go; 0: the same connections throughout.
  double reconnect_per_second = 0;
  // Open loop: each body's class (a priority level, say), whose answers are
  // also counted apart (LoadResult::by_class); empty: none.
  std::vector<std::size_t> classes;
};

// Latencies of the answers with one status, in milliseconds.
struct Latencies {
  std::size_t count = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
};

// One class's answers: per status, their count and latencies.
struct ClassResult {
  std::map<int, Latencies> latencies;
};

struct LoadResult {
  std::size_t requests = 0;  // answered 200 in the measured window
  std::size_t errors = 0;    // other statuses and transport errors (status 0)
  std::map<int, std::size_t> statuses;
  std::map<int, Latencies> latencies;  // per status; 0: not sent, or no answer
  double seconds = 0;
  double requests_per_second = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;  // of the 200s
  std::size_t cut = 0;         // of the status-0 ones: sent, and their connection closed or failed before a reply
  std::size_t reconnects = 0;  // open loop with reconnect_per_second: connections opened anew
  std::size_t late = 0;  // open loop: requests sent more than 1 ms after they were due
                         // (or not at all: every connection busy, counted as status 0)
  std::map<std::size_t, ClassResult> by_class;  // with LoadConfig::classes
};

LoadResult run_load(const LoadConfig& config);

// The closed loop over gRPC (grpc_loadgen.cpp): `path` is the method
// ("/numaserve.v1.Ranking/Predict"), `bodies` its request messages, each
// connection a channel of its own with one call outstanding. OK counts as
// status 200, another gRPC status as 1000 + its code, no answer as 0.
LoadResult run_grpc_load(const LoadConfig& config);

}  // namespace numaserve::bench
