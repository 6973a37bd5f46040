#pragma once
// The service as the transport sees it (http/handler.h): each request
// routed by method and path (the table in router.cpp) through the one error
// boundary, and each worker's start and turns handed to the service.

#include <cstddef>

#include "api/service.h"
#include "http/handler.h"

namespace numaserve::api {

class Router final : public http::Handler {
 public:
  // With `admin_port`, data routes answer on the main port only and what
  // operators read on the admin one only (probes on both); without, the
  // main port answers every route.
  Router(Service& service, bool admin_port) : service_(service), split_(admin_port) {}

  void on_worker_start(std::size_t worker) override { service_.start_worker(worker); }
  void on_request(std::size_t worker, http::Request&& request, http::Responder responder) override;
  Turn on_turn(std::size_t worker) override { return service_.turn(worker); }
  bool turn_due(std::size_t worker) const override { return service_.turn_due(worker); }
  http::Reply refusal(int status, const std::string& message, const std::string& field) const override;

 private:
  void grpc_call(Call& call);
  void no_route(Call& call, bool elsewhere);
  Service& service_;
  const bool split_;
};

}  // namespace numaserve::api
