// Triton's model repository extension, on the admin port only, over REST
// and gRPC (the admin port takes HTTP/2 too): the index of
// every version the repository holds and its state, and the load and unload
// of a model by name. Loads run on the manager's thread (reload/); the route
// takes the call and answers when the load has served or failed, from that
// thread (a Responder may send from any thread).
#include <nlohmann/json.hpp>

#include <memory>

#include "api/handlers.h"
#include "codec/errors.h"
#include "codec/grpc_codec.h"
#include "repository/repository.h"

namespace numaserve::api {
namespace {

Result<lifecycle::RepositoryControl*> control_of(Service& service) {
  if (service.repository() == nullptr) {
    return make_error(Error::Code::kNotFound, "this service has no model repository (it serves --model-dir)", "model_repository");
  }
  return service.repository();
}

http::Reply json_reply(int status, std::string body) {
  http::Reply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

// Every version the repository holds, or only those serving.
Result<std::vector<lifecycle::RepositoryEntry>> listed(Service& service, bool only_ready) {
  auto control = control_of(service);
  if (!control) return tl::unexpected(control.error());
  auto entries = (*control)->index();
  if (only_ready) {
    std::erase_if(entries, [](const lifecycle::RepositoryEntry& e) { return e.state != lifecycle::VersionState::kReady; });
  }
  return entries;
}

// Load and unload answer when the manager is done: {} on REST, the empty
// response message on gRPC.
using Action = void (lifecycle::RepositoryControl::*)(const std::string&, std::function<void(Status)>);
Answer act(Service& service, Call& call, const std::string& model, Action action) {
  auto control = control_of(service);
  if (!control) return tl::unexpected(control.error());
  // Names, never paths: nothing outside the repository can be named.
  if (auto name = repository::check_model_name(model); !name) return tl::unexpected(name.error());
  auto responder = std::make_shared<http::Responder>(std::move(call.responder));
  const auto protocol = call.request.protocol;
  ((*control)->*action)(model, [&service, responder, route = call.route, protocol](Status done) {
    http::Reply ok;
    if (protocol == http::Protocol::kGrpc) {
      ok.grpc_status = 0;
    } else {
      ok = json_reply(200, "{}");
    }
    service.finish(route, *responder, done ? std::move(ok) : codec::error_reply(done.error(), protocol));
  });
  return std::nullopt;
}

Answer grpc_act(Service& service, Call& call, Action action) {
  auto model = codec::grpc::parse_repository_model(call.request.body);
  if (!model) return tl::unexpected(model.error());
  return act(service, call, *model, action);
}

}  // namespace

// Body (optional): {"ready": true} lists only what serves.
Answer repository_index(Service& service, Call& call) {
  bool only_ready = false;
  if (!call.request.body.empty()) {
    const auto body = nlohmann::json::parse(call.request.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return make_error(Error::Code::kInvalidArgument, "the index request's body must be a JSON object", "body");
    }
    if (body.contains("ready")) {
      if (!body["ready"].is_boolean()) return make_error(Error::Code::kInvalidArgument, "\"ready\" must be true or false", "ready");
      only_ready = body["ready"].get<bool>();
    }
  }
  const auto entries = listed(service, only_ready);
  if (!entries) return tl::unexpected(entries.error());
  auto out = nlohmann::json::array();
  for (const auto& e : *entries) {
    nlohmann::json entry{{"name", e.name}, {"version", e.version}, {"state", lifecycle::state_name(e.state)}};
    if (!e.reason.empty()) entry["reason"] = e.reason;
    out.push_back(std::move(entry));
  }
  return json_reply(200, out.dump());
}

Answer repository_load(Service& service, Call& call) {
  return act(service, call, call.params.name, &lifecycle::RepositoryControl::load);
}
Answer repository_unload(Service& service, Call& call) {
  return act(service, call, call.params.name, &lifecycle::RepositoryControl::unload);
}

Answer grpc_repository_index(Service& service, Call& call) {
  const auto only_ready = codec::grpc::parse_repository_index(call.request.body);
  if (!only_ready) return tl::unexpected(only_ready.error());
  const auto entries = listed(service, *only_ready);
  if (!entries) return tl::unexpected(entries.error());
  http::Reply reply;
  reply.grpc_status = 0;
  reply.body = codec::grpc::repository_index_reply(*entries);
  return reply;
}
Answer grpc_repository_load(Service& service, Call& call) { return grpc_act(service, call, &lifecycle::RepositoryControl::load); }
Answer grpc_repository_unload(Service& service, Call& call) {
  return grpc_act(service, call, &lifecycle::RepositoryControl::unload);
}

}  // namespace numaserve::api
