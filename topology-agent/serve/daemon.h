#pragma once
// `numaserve-topology-agent run`, the DaemonSet: the endpoint up, then the
// updater's loop (updater/loop.h) until SIGTERM, each cycle's result
// served, logged and counted; with `oneshot`, one cycle and no endpoint.

#include "http/http.h"
#include "updater/loop.h"
#include "updater/updater.h"

namespace numaserve::agent::serve {

struct DaemonConfig {
  updater::UpdaterConfig updater;
  updater::LoopConfig loop;  // watched: filled from updater.discover
  kube::http::EndpointConfig endpoint;
  bool oneshot = false;
};

// The exit status: 0 after SIGTERM (or a oneshot cycle that succeeded), 1
// otherwise; failures are logged.
int run_daemon(DaemonConfig config);

}  // namespace numaserve::agent::serve
