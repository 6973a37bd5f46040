#pragma once
// One request on its way through a route, and a route's answer.

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "http/handler.h"
#include "http/message.h"
#include "numaserve/common/result.h"

namespace numaserve::api {

// The {name} and {version} segments of a matched path.
struct PathParams {
  std::string name;
  std::string version;
};

struct Call {
  http::Request request;
  PathParams params;
  std::size_t worker = 0;     // whose loop read it
  std::string_view route;     // the route's metrics label
  http::Responder responder;  // taken by a route that answers later
  // Its priority level and its own queue timeout (0: its level's), once
  // Service::schedule() has read them.
  std::size_t priority = 1;
  std::chrono::microseconds timeout{0};
};

// A route's answer: an error (errors.cpp makes the reply), a reply now, or
// nothing — the route took the call to answer when its batch has run.
using Answer = Result<std::optional<http::Reply>>;

class Service;

// The one error boundary (router.cpp): runs `handle` and sends its reply,
// its error's reply, or a 500 for an exception; nothing when the route
// answers later — and then, when it does, through here again.
void respond(Service& service, Call& call, const std::function<Answer()>& handle);

}  // namespace numaserve::api
