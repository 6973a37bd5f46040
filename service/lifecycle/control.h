#pragma once
// The two faces of the lifecycle toward the rest of the service, so that
// neither side knows how the other works:
//   - RepositoryControl: what the repository's admin routes (api/) ask of
//     whoever loads versions (the Manager);
//   - ServiceHooks: what the Manager acts on in the service it loads for
//     (api::Service::lifecycle_hooks): the table of versions served, the
//     metrics, a new model's name, a warm-up on every worker.
// api/ depends on lifecycle/, never the reverse.

#include <functional>
#include <string>
#include <vector>

#include "features/model_spec.h"
#include "lifecycle/model_table.h"
#include "lifecycle/plan.h"
#include "metrics/metrics.h"
#include "numaserve/common/result.h"

namespace numaserve::lifecycle {

// One line of the repository's index.
struct RepositoryEntry {
  std::string name, version;
  VersionState state = VersionState::kUnavailable;
  std::string reason;
};

class RepositoryControl {
 public:
  virtual ~RepositoryControl() = default;
  virtual std::vector<RepositoryEntry> index() const = 0;
  // `done` is called once, from any thread: when the versions the
  // repository wants of `name` serve, or with why not.
  virtual void load(const std::string& name, std::function<void(Status)> done) = 0;
  virtual void unload(const std::string& name, std::function<void(Status)> done) = 0;
};

struct ServiceHooks {
  ModelTable* models = nullptr;
  metrics::Metrics* metrics = nullptr;
  // A model served from now on (Service::add_model), before its first
  // version is prepared.
  std::function<Status(const features::ModelSpec& spec)> add_model;
  // Warms `version` on every worker; `done` once, from any thread
  // (Service::warm).
  std::function<void(HeldVersion version, std::function<void(Status)> done)> warm;
};

}  // namespace numaserve::lifecycle
