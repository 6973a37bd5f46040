// Triton's model repository extension, on the admin port only: the index of
// every version the repository holds and its state, and the load and unload
// of a model by name. Loads run on the manager's thread (reload/); the route
// takes the call and answers when the load has served or failed, from that
// thread (a Responder may send from any thread).
#include <nlohmann/json.hpp>

#include <memory>

#include "api/errors.h"
#include "api/handlers.h"
#include "repository/repository.h"

namespace numaserve::api {
namespace {

Result<RepositoryControl*> control_of(Service& service) {
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

// Load and unload answer when the manager is done.
using Action = void (RepositoryControl::*)(const std::string&, std::function<void(Status)>);
Answer act(Service& service, Call& call, Action action) {
  auto control = control_of(service);
  if (!control) return tl::unexpected(control.error());
  // Names, never paths: nothing outside the repository can be named.
  if (auto name = repository::check_model_name(call.params.name); !name) return tl::unexpected(name.error());
  auto responder = std::make_shared<http::Responder>(std::move(call.responder));
  ((*control)->*action)(call.params.name, [&service, responder, route = call.route](Status done) {
    service.finish(route, *responder, done ? json_reply(200, "{}") : error_reply(done.error()));
  });
  return std::nullopt;
}

}  // namespace

// Body (optional): {"ready": true} lists only what serves.
Answer repository_index(Service& service, Call& call) {
  auto control = control_of(service);
  if (!control) return tl::unexpected(control.error());
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
  auto out = nlohmann::json::array();
  for (const auto& e : (*control)->index()) {
    if (only_ready && e.state != repository::VersionState::kReady) continue;
    nlohmann::json entry{{"name", e.name}, {"version", e.version}, {"state", repository::state_name(e.state)}};
    if (!e.reason.empty()) entry["reason"] = e.reason;
    out.push_back(std::move(entry));
  }
  return json_reply(200, out.dump());
}

Answer repository_load(Service& service, Call& call) { return act(service, call, &RepositoryControl::load); }
Answer repository_unload(Service& service, Call& call) { return act(service, call, &RepositoryControl::unload); }

}  // namespace numaserve::api
