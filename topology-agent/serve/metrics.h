#pragma once
// What the agent's endpoint serves, built from one cycle's result: JSON views
// and the Prometheus text exposition (format 0.0.4) of what the agent knows: the
// node's layout, the plan, the kernel settings that matter, and the agent's
// own health (cycles, failures by stage, last success).

#include <string>

#include "http/http.h"
#include "updater/updater.h"

namespace numaserve::agent::serve {

std::string render_metrics(const updater::CycleResult& last, const updater::Counters& counters);

// Everything the endpoint serves after a cycle. Unhealthy only when the
// machine could not be discovered: a failed publish still serves its data.
kube::http::Snapshot snapshot_of(const updater::CycleResult& last, const updater::Counters& counters);

}  // namespace numaserve::agent::serve
