#pragma once
// The service's life, as a named sequence (each step a function in
// startup.cpp, in this order):
//   read where we are pinned (cpuset, memory nodes) and the machine
//   -> plan threads -> bind memory and this thread (every later thread
//   inherits the CPUs) -> load the feature store and the models (first
//   touch: on this node) -> serve (HTTP up, live, not ready) -> warm (each
//   worker pins itself and runs warm-up forwards) -> ready (with
//   --model-repository: the repository's manager starts here, on this
//   bound thread, and loads later versions) -> SIGTERM: not ready, keep
//   serving shutdown_delay, the manager stops, stop accepting, answer what
//   was read, exit 0 (or 1 past the grace period).
// With --replicas…, supervise() runs instead: the same read of where we
// are, one replica per NUMA node (or slot), and each replica runs this same
// sequence. Torch-free: main.cpp hands in the model runtime.

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/model.h"
#include "options/serve_options.h"

namespace numaserve::startup {

// What start-up needs of the model runtime (model/'s LibTorch).
struct Runtime {
  // Loads dir/model.pt and dir/model.yaml as `version` (empty: model.yaml's)
  // and checks it runs, reading model.pt at up to `cpu_share` of one CPU;
  // the calling thread's binding decides where the weights land. The
  // repository manager's lifecycle::Loader.
  std::function<Result<std::unique_ptr<api::Model>>(const std::filesystem::path& dir, const std::string& version,
                                                    double cpu_share)>
      load;
  std::function<void(unsigned intra_op_threads)> prepare_worker_thread;
  std::function<std::string()> summary;  // "LibTorch 1.13.1 (OpenMP), BLAS ..."
};

// Returns the process's exit status; failures are logged.
int serve(const options::ServeOptions& options, const std::string& version, const Runtime& runtime);

// `command`: how to start a replica (this binary and its serve arguments).
int supervise(const options::ServeOptions& options, std::vector<std::string> command);

}  // namespace numaserve::startup
