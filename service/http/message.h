#pragma once
// An HTTP request and its reply as plain values: what the routes (service/api/)
// take and return. No transport type appears here, so handlers are tested
// without sockets and the transport (server.h) could change without them.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace numaserve::http {

// What a request came as: an HTTP/1.1 request, or a gRPC call over HTTP/2
// (its path "/package.Service/Method", its body the request message).
enum class Protocol { kHttp, kGrpc };

struct Request {
  std::string method;  // "GET", "POST", ... as sent
  std::string path;    // percent-decoded, without the query string
  std::string body;
  bool admin = false;  // arrived on the admin listener (ServerConfig::admin_port)
  // The header fields the transport does not consume itself, names in
  // lower case (Inference-Header-Content-Length, grpc-timeout, ...).
  std::vector<std::pair<std::string, std::string>> headers;
  Protocol protocol = Protocol::kHttp;
  // The caller's deadline (gRPC's grpc-timeout): work that cannot finish by
  // then is refused rather than done late.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

  // The value of the field `lower_name`, empty when absent.
  std::string_view header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers) {
      if (name == lower_name) return value;
    }
    return {};
  }
};

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type/-Length and Connection
  // A gRPC call's status code (0: OK, and the body is the reply message;
  // else the body is the status message). Absent on a gRPC call's reply the
  // application did not make (a dropped one), `status` maps to one.
  std::optional<int> grpc_status;
};

}  // namespace numaserve::http
