#pragma once
// The models served and their versions, as requests see them: each request
// resolves its model and version once, at admission, and holds that version
// (a shared pointer) until its reply is sent, so a switch never changes a
// request under way and a version is freed only when its last request has
// answered. A version is what its requests' batches run on (a
// batching::Forward): the batcher joins only jobs of the same version, so a
// batch never mixes versions.
//
// Which versions exist is decided by whoever adds them (start-up, the
// repository's manager); the table only holds what is ready, the labels
// that point at ready versions, and each model's default: the `stable`
// label when it is set, else the highest version (by number). A model's
// name is added once (Service::add_model: the feature store and metrics
// get it first) and keeps its number; its versions come and go.

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "api/model.h"
#include "batching/batcher.h"
#include "numaserve/common/result.h"

namespace numaserve::lifecycle {

struct ServedVersion final : batching::Forward {
  std::unique_ptr<api::Model> model;
  std::string name;     // model.spec().name
  std::string version;  // model.spec().version
  std::size_t model_index = 0;  // the name's place among the table's names (the feature store's index)

  Result<std::vector<float>> run(const features::Batch& batch) const override { return model->forward(batch); }
};
using HeldVersion = std::shared_ptr<const ServedVersion>;

class ModelTable {
 public:
  // `names`, in order, are the models served at start; the first is the
  // default model.
  explicit ModelTable(std::vector<std::string> names);

  std::vector<std::string> names() const;  // in number order
  // A model served from now on, numbered after the others (kept if it has
  // a number). It does not count for readiness until a version of it serves.
  void add_name(const std::string& name);

  // The model a request names (nullopt: the default model) at the version
  // it names: a number, a label, or empty for the default version. 404
  // naming "model" or "version" when there is none ready.
  Result<HeldVersion> resolve(const std::optional<std::string>& name, const std::string& version = {}) const;

  // A version about to be served: its name must be one of names(), its
  // version not served already, its feature contract the first's. Not
  // resolvable until publish(), so it can be warmed up first.
  Result<std::shared_ptr<ServedVersion>> prepare(std::unique_ptr<api::Model> model) const;
  // Serves it from now on (a version of the same number is replaced).
  void publish(HeldVersion version);
  Result<HeldVersion> add(std::unique_ptr<api::Model> model);  // prepare + publish
  // No longer served: new requests cannot resolve it; those holding it
  // finish on it. Returns it (null if it was not served).
  HeldVersion remove(const std::string& name, const std::string& version);
  // Labels for a model ("stable" -> "3"); each must point at a version
  // served now. Returns the labels refused, with the reason.
  std::vector<std::string> set_labels(const std::string& name, const std::map<std::string, std::string>& labels);

  std::vector<HeldVersion> versions(const std::string& name) const;  // served now, oldest first
  std::vector<HeldVersion> all() const;
  HeldVersion default_version(const std::string& name) const;
  std::map<std::string, std::string> labels(const std::string& name) const;

  // Readiness: every model must serve some version, but for the ones an
  // operator unloaded (the repository's unload call, or its directory
  // removed), which do not count until a version of them serves again.
  void set_unloaded(const std::string& name, bool unloaded);
  std::vector<std::string> missing() const;  // names that should serve and do not

 private:
  struct Entry {
    std::map<std::string, HeldVersion> versions;
    std::map<std::string, std::string> labels;
    std::optional<features::ModelSpec> contract;
  };
  const Entry* entry(const std::string& name) const;
  HeldVersion default_of(const Entry& entry) const;

  std::vector<std::string> names_;
  mutable std::shared_mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> unloaded_;
};

// Versions sort by number where both are numbers ("10" after "9"), else as text.
bool version_less(const std::string& a, const std::string& b);

}  // namespace numaserve::lifecycle
