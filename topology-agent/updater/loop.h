#pragma once
// The agent's run loop: a cycle at start, then one each time the triggers
// (updater/triggers.h) say so: each --interval, on SIGHUP, and soon after
// the kubelet changes what it has handed out (inotify on its state files
// and its PodResources socket), at most --max-events-per-second; SIGTERM or
// SIGINT end it.

#include <functional>
#include <string>
#include <vector>

#include "numaserve/common/result.h"
#include "updater/triggers.h"
#include "updater/updater.h"

namespace numaserve::agent::updater {

// The kubelet's files that change when it assigns CPUs, memory or devices:
// its state directory's checkpoints and the PodResources socket (recreated
// when the kubelet restarts).
std::vector<Watched> kubelet_watches(const discover::DiscoverConfig& config);

// Gets each cycle's result and its trigger's reason: "start", "interval",
// "SIGHUP", or "changed <file>".
using OnCycle = std::function<void(const CycleResult&, const std::string& reason)>;

// Runs cycles until SIGTERM or SIGINT; returns success then. The caller
// must have called block_signals() before starting any thread.
Status run_loop(Updater& updater, const LoopConfig& config, const OnCycle& on_cycle);

}  // namespace numaserve::agent::updater
