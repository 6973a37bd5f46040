#pragma once
// `numaserve make-demo-models DIR`: two model directories and a feature
// store, built without Python (TorchScript defined from C++), with fixed
// seeds so the same command always gives the same scores.
//   DIR/ranker_a  DLRM-like: 9 embedding-bag features over 8 tables, 6 dense
//                 features, bottom MLP, pairwise dot interaction, top MLP
//   DIR/ranker_b  a small MLP over the dense features and two small tables
//   DIR/store.jsonl  users and items with the features both models read

#include <cstdint>
#include <filesystem>

#include "numaserve/common/options.h"
#include "numaserve/common/result.h"

namespace numaserve::model {

struct DemoConfig {
  double embedding_mb = 200;  // ranker_a's embedding tables in all (tests use ~1)
  std::size_t users = 10000;
  std::size_t items = 20000;
  std::uint64_t seed = 42;
};

Status make_demo_models(const std::filesystem::path& dir, const DemoConfig& config);

// make-demo-models' flags, on `config`'s defaults.
std::vector<OptionSpec> demo_options(DemoConfig& config);

}  // namespace numaserve::model
