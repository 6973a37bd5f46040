#pragma once
// The agent's HTTP endpoint: GET /topology, /plan (JSON), /metrics
// (Prometheus), /healthz. The only file of the agent that includes
// cpp-httplib is server.cpp.

#include <memory>
#include <string>

#include "numaserve/common/result.h"

namespace numaserve::agent::serve {

// What the endpoint serves; replaced whole after every cycle.
struct Snapshot {
  std::string topology_json;  // empty until a discovery succeeded
  std::string plan_json;      // empty until a plan succeeded
  std::string metrics;
  std::string unhealthy_reason;  // empty: healthy
};

class StatusServer {
 public:
  StatusServer();
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  // Binds host:port (port 0 picks a free one) and serves on a thread of its own.
  Status start(const std::string& host, int port);
  int port() const;
  void publish(Snapshot snapshot);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace numaserve::agent::serve
