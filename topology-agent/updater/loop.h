#pragma once
// The agent's run loop: a cycle at start, then one each --interval, on
// SIGHUP, and soon after the kubelet changes what it has handed out (inotify
// on its state files and its PodResources socket), at most
// --max-events-per-second; SIGTERM or SIGINT end it.

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "numaserve/common/result.h"
#include "updater/updater.h"

namespace numaserve::agent::updater {

// A directory to watch and the file names in it whose changes count.
struct Watched {
  std::filesystem::path dir;
  std::vector<std::string> names;
};

// The kubelet's files that change when it assigns CPUs, memory or devices:
// its state directory's checkpoints and the PodResources socket (recreated
// when the kubelet restarts).
std::vector<Watched> kubelet_watches(const discover::DiscoverConfig& config);

struct LoopConfig {
  std::chrono::duration<double> interval{60};
  double max_events_per_second = 1;
  std::vector<Watched> watched;
};

// Why a cycle ran: "start", "interval", "SIGHUP", or "changed <file>".
using OnCycle = std::function<void(const CycleResult&, const std::string& reason)>;

// Runs cycles until SIGTERM or SIGINT; returns 0 then. The caller must have
// blocked SIGHUP, SIGTERM and SIGINT in every thread (they are read here
// through a signalfd). A directory that cannot be watched is logged and
// left to the interval.
Status run_loop(Updater& updater, const LoopConfig& config, const OnCycle& on_cycle);

}  // namespace numaserve::agent::updater
