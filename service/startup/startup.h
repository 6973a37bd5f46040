#pragma once
// The service's life, as a named sequence (each step a function in
// startup.cpp, in this order):
//   read where we are pinned (cpuset, memory nodes) and the machine
//   -> plan threads -> bind memory and this thread (every later thread
//   inherits the CPUs) -> load the feature store and the models (first
//   touch: on this node) -> serve (HTTP up, live, not ready) -> warm (each
//   worker pins itself and runs warm-up forwards) -> ready -> SIGTERM:
//   not ready, keep serving shutdown_delay, stop accepting, answer what
//   was read, exit 0 (or 1 past the grace period).
// With --replicas…, supervise() runs instead: the same read of where we
// are, one slot per worker, and each worker runs this same sequence.

#include <string>
#include <vector>

#include "options/serve_options.h"

namespace numaserve::startup {

// Returns the process's exit status; failures are logged.
int serve(const serve::ServeOptions& options, const std::string& version);

// `command`: how to start a worker (this binary and its serve arguments).
int supervise(const serve::ServeOptions& options, std::vector<std::string> command);

}  // namespace numaserve::startup
