#include "http/http.h"

#include <httplib.h>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "numaserve/common/duration.h"

namespace numaserve::kube::http {
namespace {

void json_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}}.dump() + "\n", "application/json");
}

}  // namespace

struct StatusServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  std::mutex mutex;
  Snapshot snapshot;
  int port = 0;

  Snapshot current() {
    std::lock_guard lock(mutex);
    return snapshot;
  }

  void serve_json(httplib::Response& res, std::string Snapshot::*field, const char* what) {
    const std::string body = current().*field;
    if (body.empty()) return json_error(res, 503, std::string("no ") + what + " yet: see /healthz and the agent's log");
    res.set_content(body, "application/json");
  }
};

StatusServer::StatusServer() : impl_(std::make_unique<Impl>()) {}

StatusServer::~StatusServer() { stop(); }

Status StatusServer::start(const std::string& host, int port) {
  auto& s = impl_->server;
  // A monitoring endpoint: a few scrapers and humans, never a hot path.
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // cpp-httplib's default adds SO_REUSEPORT, which lets a second agent bind
  // the same port silently and take half the scrapes; a port in use must fail.
  s.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.Get("/topology", [this](const httplib::Request&, httplib::Response& res) {
    impl_->serve_json(res, &Snapshot::topology_json, "topology");
  });
  s.Get("/plan", [this](const httplib::Request&, httplib::Response& res) {
    impl_->serve_json(res, &Snapshot::plan_json, "plan");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(impl_->current().metrics, "text/plain; version=0.0.4");
  });
  s.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    const std::string reason = impl_->current().unhealthy_reason;
    if (!reason.empty()) return json_error(res, 503, reason);
    res.set_content("ok\n", "text/plain");
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404) json_error(res, 404, "no route " + req.method + " " + req.path);
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    json_error(res, 500, "internal error");
  });

  impl_->port = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (impl_->port < 0) {
    return make_error(Error::Code::kUnavailable,
                      "cannot listen on " + host + ":" + std::to_string(port) + " (in use, or not an address here)");
  }
  impl_->thread = std::thread([this] {
    impl_->server.listen_after_bind();
    impl_->listen_returned = true;
  });
  return {};
}

int StatusServer::port() const { return impl_->port; }

void StatusServer::publish(Snapshot snapshot) {
  std::lock_guard lock(impl_->mutex);
  impl_->snapshot = std::move(snapshot);
}

void StatusServer::stop() {
  if (!impl_->thread.joinable()) return;
  // cpp-httplib's stop() is a no-op until the accept loop runs; a stop that
  // came first would leave listen_after_bind() waiting forever.
  while (!impl_->server.is_running() && !impl_->listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server.stop();
  impl_->thread.join();
}

struct Client::Impl {
  ClientConfig config;
  httplib::Client client;
  explicit Impl(ClientConfig c) : config(std::move(c)), client(config.base_url) {}
};

Client::Client(ClientConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  auto& c = impl_->client;
  const auto timeout = to_duration<std::chrono::microseconds>(impl_->config.timeout_seconds);
  c.set_connection_timeout(timeout);
  c.set_read_timeout(timeout);
  c.set_write_timeout(timeout);
  if (!impl_->config.ca_file.empty()) c.set_ca_cert_path(impl_->config.ca_file);
  c.enable_server_certificate_verification(true);
}

Client::~Client() = default;

Result<Response> Client::send(const Request& request) {
  const httplib::Headers h(request.headers.begin(), request.headers.end());
  auto& c = impl_->client;
  const std::string& path = request.path_and_query;
  const std::string& m = request.method;
  if (m != "GET" && m != "POST" && m != "PUT" && m != "PATCH" && m != "DELETE") {
    return make_error(Error::Code::kInvalidArgument, "HTTP method " + m + ": not one the client sends");
  }
  httplib::Result result = m == "GET"    ? c.Get(path, h)
                           : m == "POST" ? c.Post(path, h, request.body, request.content_type)
                           : m == "PUT"  ? c.Put(path, h, request.body, request.content_type)
                           : m == "PATCH" ? c.Patch(path, h, request.body, request.content_type)
                                          : c.Delete(path, h, request.body, request.content_type);
  if (!result) {
    return make_error(Error::Code::kUnavailable, request.method + " " + impl_->config.base_url + path + ": " +
                                                     httplib::to_string(result.error()));
  }
  return Response{result->status, result->body};
}

std::vector<OptionSpec> endpoint_options(EndpointConfig& e) {
  return {text_option("listen_address", "ADDR", "Address of the HTTP endpoint (/metrics, /healthz, /plan...)", e.host),
          count_option("port", "N", "Port of the HTTP endpoint; 0 picks a free one", e.port, 65535u)};
}

}  // namespace numaserve::kube::http
