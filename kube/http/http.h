#pragma once
// The cluster programs' HTTP transport, both ways: the endpoint each serves
// (the agent's GET /topology, /plan, /metrics, /healthz; the operator's
// /metrics, /healthz) and the HTTPS client each calls the Kubernetes API
// server with. http.cpp is the only file of either that includes
// cpp-httplib; everything else sees these plain types.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "numaserve/common/options.h"
#include "numaserve/common/result.h"

namespace numaserve::kube::http {

// What the endpoint serves; replaced whole after every cycle.
struct Snapshot {
  std::string topology_json;  // empty until a discovery succeeded
  std::string plan_json;      // empty until a plan succeeded
  std::string metrics;
  std::string unhealthy_reason;  // empty: healthy
};

// Where the endpoint listens.
struct EndpointConfig {
  std::string host = "0.0.0.0";
  unsigned port = 9300;  // 0: any free port
};
// --listen-address and --port (the agent's `run` and the operator's).
std::vector<OptionSpec> endpoint_options(EndpointConfig& e);

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

struct ClientConfig {
  std::string base_url;  // "https://10.96.0.1:443"
  std::string ca_file;   // CA bundle the server's certificate must chain to; empty: system default
  double timeout_seconds = 10;
};

struct Response {
  int status = 0;
  std::string body;
};

struct Request {
  std::string method;  // GET, POST, PUT, PATCH or DELETE
  std::string path_and_query;
  std::map<std::string, std::string> headers;
  std::string body;
  std::string content_type;  // with a body
};

// One request at a time; a transport failure (refused, TLS, timeout) is an
// error, an HTTP status of any kind is a Response.
class Client {
 public:
  explicit Client(ClientConfig config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result<Response> send(const Request& request);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace numaserve::kube::http
