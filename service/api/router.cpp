// What a client can ask of the service, in one table per protocol (REST,
// gRPC), and the one error boundary every request passes: a route's Error becomes its reply in
// errors.cpp, an exception a 500, a path no route has a 404, a method the
// path does not take a 405 with Allow.
#include "api/router.h"

#include <string_view>

#include "api/handlers.h"
#include "codec/errors.h"
#include "http/grpc_wire.h"

namespace numaserve::api {
namespace {

// Which listener serves a route when the service has an admin port: data
// on the main one, what operators read on the admin one, probes on both.
// Without an admin port the main one serves every route but those that
// change what is served (kAdminOnly), which only an admin port serves.
enum class Port { kData, kAdmin, kBoth, kAdminOnly };

struct Route {
  Port port;
  std::string_view method;  // a GET route answers HEAD too
  std::string_view path;    // {name} and {version} stand for one path segment each
  std::string_view label;   // numaserve_requests_total{route=...}
  Answer (*handle)(Service&, Call&);
};

constexpr Route kRoutes[] = {
    {Port::kData, "POST", "/predict", "/predict", &predict},
    {Port::kBoth, "GET", "/healthz", "/healthz", &healthz},
    {Port::kBoth, "GET", "/readyz", "/readyz", &readyz},
    {Port::kAdmin, "GET", "/metrics", "/metrics", &prometheus_metrics},
    {Port::kAdmin, "GET", "/placement", "/placement", &placement},
    // KServe Open Inference Protocol v2.
    {Port::kData, "GET", "/v2", "/v2", &v2_server},
    {Port::kBoth, "GET", "/v2/health/live", "/v2/health/live", &v2_live},
    {Port::kBoth, "GET", "/v2/health/ready", "/v2/health/ready", &v2_ready},
    {Port::kData, "GET", "/v2/models/{name}", "/v2/models/{name}", &v2_model},
    {Port::kData, "GET", "/v2/models/{name}/versions/{version}", "/v2/models/{name}", &v2_model},
    {Port::kData, "GET", "/v2/models/{name}/ready", "/v2/models/{name}/ready", &v2_model_ready},
    {Port::kData, "GET", "/v2/models/{name}/versions/{version}/ready", "/v2/models/{name}/ready", &v2_model_ready},
    {Port::kData, "POST", "/v2/models/{name}/infer", "/v2/models/{name}/infer", &v2_infer},
    {Port::kData, "POST", "/v2/models/{name}/versions/{version}/infer", "/v2/models/{name}/infer", &v2_infer},
    // Triton's model repository extension.
    {Port::kAdminOnly, "POST", "/v2/repository/index", "/v2/repository/index", &repository_index},
    {Port::kAdminOnly, "POST", "/v2/repository/models/{name}/load", "/v2/repository/models/{name}/load", &repository_load},
    {Port::kAdminOnly, "POST", "/v2/repository/models/{name}/unload", "/v2/repository/models/{name}/unload", &repository_unload},
};

// The gRPC methods: "/package.Service/Method", each its own label, served
// where their REST twins are (the gRPC port is a data port; the admin port
// takes HTTP/2 as well).
struct GrpcMethod {
  Port port;
  std::string_view path;
  Answer (*handle)(Service&, Call&);
};

constexpr GrpcMethod kGrpcMethods[] = {
    {Port::kBoth, "/grpc.health.v1.Health/Check", &grpc_health_check},
    {Port::kData, "/numaserve.v1.Ranking/Predict", &ranking_predict},
    {Port::kBoth, "/inference.GRPCInferenceService/ServerLive", &grpc_server_live},
    {Port::kBoth, "/inference.GRPCInferenceService/ServerReady", &grpc_server_ready},
    {Port::kData, "/inference.GRPCInferenceService/ModelReady", &grpc_model_ready},
    {Port::kData, "/inference.GRPCInferenceService/ServerMetadata", &grpc_server_metadata},
    {Port::kData, "/inference.GRPCInferenceService/ModelMetadata", &grpc_model_metadata},
    {Port::kData, "/inference.GRPCInferenceService/ModelInfer", &grpc_model_infer},
    {Port::kAdminOnly, "/inference.GRPCInferenceService/RepositoryIndex", &grpc_repository_index},
    {Port::kAdminOnly, "/inference.GRPCInferenceService/RepositoryModelLoad", &grpc_repository_load},
    {Port::kAdminOnly, "/inference.GRPCInferenceService/RepositoryModelUnload", &grpc_repository_unload},
};

// The next "/segment" of `path` from `at`, without its slash.
std::string_view next_segment(std::string_view path, std::size_t& at) {
  if (at >= path.size() || path[at] != '/') return {};
  const std::size_t start = at + 1;
  at = std::min(path.find('/', start), path.size());
  return path.substr(start, at - start);
}

bool matches(std::string_view pattern, std::string_view path, PathParams& params) {
  std::size_t p = 0, q = 0;
  while (p < pattern.size() && q < path.size()) {
    const auto want = next_segment(pattern, p);
    const auto got = next_segment(path, q);
    if (want == "{name}" || want == "{version}") {
      if (got.empty()) return false;
      (want == "{name}" ? params.name : params.version) = std::string(got);
    } else if (want != got) {
      return false;
    }
  }
  return p == pattern.size() && q == path.size();
}

bool serves(Port port, bool split, bool admin) {
  if (port == Port::kAdminOnly) return split && admin;
  if (!split || port == Port::kBoth) return true;
  return (port == Port::kAdmin) == admin;
}

// Where a refused path or method is served instead.
std::string elsewhere_note(const Call& call, bool elsewhere) {
  if (!elsewhere) return "";
  return call.request.admin ? " on the admin port; it is on the main port" : " on this port; it is on the admin port";
}

bool takes(const Route& route, std::string_view method) {
  return method == route.method || (route.method == "GET" && method == "HEAD");
}

}  // namespace

void respond(Service& service, Call& call, const std::function<Answer()>& handle) {
  Answer answer = [&]() -> Answer {
    try {
      return handle();
    } catch (const std::exception& e) {
      return make_error(Error::Code::kInternal, std::string("internal error: ") + e.what());
    }
  }();
  if (answer && !*answer) return;  // the route answers later, when its batch has run
  service.finish(call.route, call.responder,
                 answer ? std::move(**answer) : codec::error_reply(answer.error(), call.request.protocol));
}

void Router::on_request(std::size_t worker, http::Request&& request, http::Responder responder) {
  service_.begin_request();
  Call call{std::move(request), {}, worker, "other", std::move(responder)};
  if (call.request.protocol == http::Protocol::kGrpc) return grpc_call(call);
  std::string allow;  // methods of the routes the path matched, when none took the method
  bool elsewhere = false;  // the path is served, on the other port
  for (const Route& route : kRoutes) {
    PathParams params;
    if (!matches(route.path, call.request.path, params)) continue;
    if (!serves(route.port, split_, call.request.admin)) {
      elsewhere = true;
      continue;
    }
    call.route = route.label;
    if (!takes(route, call.request.method)) {
      if (allow.find(route.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + std::string(route.method);
      continue;
    }
    call.params = std::move(params);
    respond(service_, call, [&] { return route.handle(service_, call); });
    return;
  }
  if (allow.empty()) return no_route(call, elsewhere);
  auto reply = codec::error_reply(Error{Error::Code::kNotAllowed,
                                 call.request.method + " not allowed on " + call.request.path + "; use " + allow, "method"});
  reply.headers.emplace_back("Allow", allow);
  service_.finish(call.route, call.responder, std::move(reply));
}

void Router::grpc_call(Call& call) {
  bool elsewhere = false;
  for (const GrpcMethod& method : kGrpcMethods) {
    if (call.request.path != method.path) continue;
    if (!serves(method.port, split_, call.request.admin)) {
      elsewhere = true;
      break;
    }
    call.route = method.path;
    respond(service_, call, [&] { return method.handle(service_, call); });
    return;
  }
  // A method this server does not have, here or at all: gRPC's UNIMPLEMENTED.
  call.route = "other";
  http::Reply reply;
  reply.status = 404;
  reply.grpc_status = http::grpc::kUnimplemented;
  reply.body = "no method " + call.request.path + elsewhere_note(call, elsewhere);
  service_.finish(call.route, call.responder, std::move(reply));
}

void Router::no_route(Call& call, bool elsewhere) {
  call.route = "other";
  service_.finish(call.route, call.responder,
                  codec::error_reply(Error{Error::Code::kNotFound,
                                    "no route " + call.request.method + " " + call.request.path + elsewhere_note(call, elsewhere),
                                    "path"}));
}

http::Reply Router::refusal(int status, const std::string& message, const std::string& field) const {
  return codec::status_reply(status, Error{Error::Code::kInvalidArgument, message, field});
}

}  // namespace numaserve::api
