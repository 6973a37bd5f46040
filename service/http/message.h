#pragma once
// An HTTP request and its reply as plain values: what the routes (service/api/)
// take and return. No transport type appears here, so handlers are tested
// without sockets and the transport (server.h) could change without them.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace numaserve::http {

struct Request {
  std::string method;  // "GET", "POST", ... as sent
  std::string path;    // percent-decoded, without the query string
  std::string body;
  bool admin = false;  // arrived on the admin listener (ServerConfig::admin_port)
  // The header fields the transport does not consume itself, names in
  // lower case (Inference-Header-Content-Length, grpc-timeout, ...).
  std::vector<std::pair<std::string, std::string>> headers;

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
};

}  // namespace numaserve::http
