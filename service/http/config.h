#pragma once
// The transport's options, as the service's option table (service/options/)
// fills them: a plain struct, so whoever sets them needs no transport header.

#include <cstddef>
#include <string>

namespace numaserve::http {

struct ServerConfig {
  std::string host = "0.0.0.0";
  int port = 8080;  // 0: any free port
  // A second listener for operators (metrics, placement, probes), on the same
  // workers; its requests say so (Request::admin). -1: none; 0: any free port.
  int admin_port = -1;
  // A listener for gRPC (HTTP/2 without TLS, as a cluster's gRPC clients and
  // Kubernetes' gRPC probes speak it), on the same workers; its calls say so
  // (Request::protocol). -1: none; 0: any free port.
  int grpc_port = -1;
  std::size_t workers = 1;  // pinned threads, each with its own event loop
  // Open connections; beyond it a new one gets 503 and is closed. 0: the
  // file-descriptor limit (raised to its hard limit at start) less a reserve.
  std::size_t max_connections = 0;
  double header_timeout_seconds = 10;  // first byte of a request -> end of its header, else 408
  double body_timeout_seconds = 30;    // end of header -> end of body, and the longest send of a reply
  double idle_timeout_seconds = 60;    // a keep-alive connection with no request is closed after this
  // During the drain a connection with no request is closed only once it
  // has been idle this long: a client in a closed loop sends its next
  // request microseconds after a reply, and closing under it would break it.
  double shutdown_idle_seconds = 0.2;
  std::size_t max_header_bytes = 16u << 10;  // 431 beyond
  std::size_t max_body_bytes = 8u << 20;     // 413 beyond (chunked bodies count their decoded bytes)
  // A connection retires after this many requests, or once this old (each
  // connection's age drawn within ±10% of it, so a fleet's clients do not
  // reconnect in step): its reply carries Connection: close and it closes
  // after that reply, never mid-request; requests the client already
  // pipelined behind it are answered first. Clients then reconnect, and an
  // L4 balancer (kube-proxy) spreads them again. 0: never.
  std::size_t max_connection_requests = 0;
  double max_connection_age_seconds = 0;
  // Several processes may share the port (the per-NUMA-node supervisor);
  // off by default so a port in use is an error, not a silent split.
  bool reuse_port = false;
};

}  // namespace numaserve::http
