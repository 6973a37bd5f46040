#pragma once
// `numaserve feature-store load`: a JSON Lines store written into Redis the
// way Feast materializes an online store, so the service (or Feast itself)
// reads it back. The layout is the served models' model.yaml mapping.

#include <string>
#include <vector>

#include "numaserve/common/options.h"
#include "numaserve/common/result.h"

namespace numaserve::feature_store {

struct LoadConfig {
  std::string file;                     // the JSON Lines store
  std::string to;                       // redis://..., unix://... or redis+cluster://...
  std::string password_file;
  std::string project;                  // overrides model.yaml's feature_store.project
  std::vector<std::string> model_dirs;  // their model.yaml say where each feature goes
  double timeout_seconds = 10;
};

std::vector<OptionSpec> load_options(LoadConfig& c);

struct Loaded {
  std::size_t users = 0, items = 0;
  std::string where;  // the URL, redacted
};
// Writes every entity with one HSET (its features and each view's
// timestamp, now), pipelined a thousand at a time (in a cluster: per master).
Result<Loaded> load(const LoadConfig& config);

}  // namespace numaserve::feature_store
