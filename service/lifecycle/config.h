#pragma once
// What --model-repository and its reloads are told at start. Header-only,
// so the options table (options/) builds its rows on these very defaults.

#include <string>

namespace numaserve::lifecycle {

// What makes the service look at the repository again after start:
// nothing, the filesystem (inotify and a periodic rescan) or the admin
// port's repository calls (in poll mode too).
enum class ControlMode { kNone, kPoll, kExplicit };

struct ReloadConfig {
  std::string repository;  // DIR/<model>/<version>/; empty: --model-dir serves
  ControlMode control_mode = ControlMode::kNone;
  // availability: a new version loads and warms beside the old, which is
  // unloaded after the switch (room for both); resource: the old is
  // unloaded first and the model is unavailable meanwhile.
  bool availability = true;
  // idle: a load's own CPU work (reading, checking, the synthetic forward)
  // runs SCHED_IDLE, on what the workers leave; normal: beside them.
  bool idle_priority = true;
  // The share of one CPU a reload may take (CpuPacer: reading and parsing
  // model.pt, the graph rewrites). The bound under normal priority, where a
  // load at full speed competes with the workers for their CPU; at idle
  // priority too, where the p50 during back-to-back reloads rose 31% at
  // full speed and 9% at 0.25 (bench/reload.sh).
  double cpu_share = 0.25;
  // poll: a full rescan this often, should an inotify event be missed
  // (overflow, a filesystem that sends none).
  double rescan_seconds = 10;
};

}  // namespace numaserve::lifecycle
