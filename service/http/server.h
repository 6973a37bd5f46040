#pragma once
// The service's HTTP transport. server.cpp is the only file of the service
// that includes cpp-httplib: the routes (service/api/) see these plain
// types, so they are tested without sockets and the library could be
// swapped without touching them.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve::http {

struct Request {
  std::string method;
  std::string path;
  std::string body;
};

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

// Every request, any method and path, goes to one handler: routing, 404 and
// 405 are the API's, so they answer in its JSON error format.
using Handler = std::function<Reply(const Request&)>;

struct ServerConfig {
  std::string host = "0.0.0.0";
  int port = 8080;  // 0: any free port
  // A pool thread serves one keep-alive connection at a time, so the pool
  // must be larger than the connections upstream services keep open.
  std::size_t threads = 128;
  std::size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  std::size_t keep_alive_max_requests = 100000;
  double keep_alive_seconds = 5;
  double read_timeout_seconds = 10;
  // Several processes may share the port (the per-NUMA-node supervisor);
  // off by default so a port in use is an error, not a silent split.
  bool reuse_port = false;
};

class Server {
 public:
  Server();
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Status start(const ServerConfig& config, Handler handler);
  int port() const;
  // Stops accepting, answers every request already read, then returns.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace numaserve::http
