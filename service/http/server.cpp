#include "http/server.h"

#include <httplib.h>

#include <pthread.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "http/predict_json.h"

namespace numaserve::http {
namespace {

void set_reply(httplib::Response& res, const Reply& reply) {
  res.status = reply.status;
  for (const auto& [name, value] : reply.headers) res.set_header(name, value);
  res.set_content(reply.body, reply.content_type);
}

void set_error(httplib::Response& res, int status, const std::string& message, const std::string& field) {
  res.status = status;
  res.set_content(error_json(Error{Error::Code::kInvalidArgument, message, field}), "application/json");
}

std::chrono::microseconds micros(double seconds) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(seconds));
}

}  // namespace

struct Server::Impl {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  int port = 0;
};

Server::Server() : impl_(std::make_unique<Impl>()) {}

Server::~Server() { stop(); }

Status Server::start(const ServerConfig& config, Handler handler) {
  auto& s = impl_->server;
  const std::size_t threads = config.threads == 0 ? 1 : config.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(config.max_body_bytes);
  s.set_keep_alive_max_count(config.keep_alive_max_requests);
  s.set_keep_alive_timeout(static_cast<time_t>(config.keep_alive_seconds));
  s.set_read_timeout(micros(config.read_timeout_seconds));
  s.set_write_timeout(micros(config.read_timeout_seconds));
  s.set_tcp_nodelay(true);
  const bool reuse_port = config.reuse_port;
  s.set_socket_options([reuse_port](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (reuse_port) ::setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
  });

  auto route = [handler](const httplib::Request& req, httplib::Response& res) {
    set_reply(res, handler(Request{req.method, req.path, req.body}));
  };
  s.Get(".*", route);
  s.Post(".*", route);
  s.Put(".*", route);
  s.Patch(".*", route);
  s.Delete(".*", route);
  s.Options(".*", route);

  const std::size_t max_body = config.max_body_bytes;
  // Refusals cpp-httplib makes before a handler runs, in the API's format.
  s.set_error_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      set_error(res, 413, "request body larger than the limit of " + std::to_string(max_body) + " bytes", "body");
    } else if (res.status == 400) {
      set_error(res, 400, "malformed HTTP request", "");
    } else if (res.status == 404) {
      set_error(res, 404, "no route " + req.method + " " + req.path, "path");
    } else if (res.status >= 400) {
      set_error(res, res.status, "request refused by the HTTP layer", "");
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    set_error(res, 500, "internal error", "");
  });

  impl_->port = config.port == 0 ? s.bind_to_any_port(config.host)
                                  : (s.bind_to_port(config.host, config.port) ? config.port : -1);
  if (impl_->port < 0) {
    return make_error(Error::Code::kUnavailable, "cannot listen on " + config.host + ":" + std::to_string(config.port) +
                                                     " (in use, or not an address here)");
  }
  impl_->thread = std::thread([this] {
    // The pool's threads start here and inherit the name: /placement and
    // /metrics tell them from the inference workers by it.
    pthread_setname_np(pthread_self(), "ns-http");
    impl_->server.listen_after_bind();
    impl_->listen_returned = true;
  });
  return {};
}

int Server::port() const { return impl_->port; }

void Server::stop() {
  if (!impl_->thread.joinable()) return;
  // cpp-httplib's stop() is a no-op until the accept loop runs; a stop that
  // came first would leave listen_after_bind() waiting forever.
  while (!impl_->server.is_running() && !impl_->listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Closes the listening socket, ends keep-alive loops after their current
  // request, and joins the pool once every accepted request is answered.
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace numaserve::http
