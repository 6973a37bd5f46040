#pragma once
// Tiny demo models (1 MiB of embeddings, 50 users, 200 items), generated
// once per test binary with the same code as `numaserve make-demo-models`.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model/demo_models.h"
#include "served.h"

namespace numaserve::testing {

inline numaserve::model::DemoConfig tiny_demo(std::uint64_t seed = 42) {
  numaserve::model::DemoConfig config;
  config.embedding_mb = 1;
  config.users = 50;
  config.items = 200;
  config.seed = seed;
  return config;
}

// The directory holding ranker_a/, ranker_b/ and store.jsonl.
inline const std::filesystem::path& demo_dir() {
  static const std::filesystem::path dir = [] {
    auto d = make_temp_dir("numaserve-demo");
    auto made = numaserve::model::make_demo_models(d, tiny_demo());
    if (!made) ADD_FAILURE() << made.error().message;
    return d;
  }();
  return dir;
}

// A copy of the demo's ranker_a whose model.yaml ends with `lines`.
inline std::filesystem::path ranker_a_with(const std::string& lines) {
  const auto dir = make_temp_dir("numaserve-ranker");
  std::filesystem::copy(demo_dir() / "ranker_a", dir, std::filesystem::copy_options::recursive);
  std::ifstream in(dir / "model.yaml");
  std::stringstream yaml;
  yaml << in.rdbuf();
  std::ofstream(dir / "model.yaml") << yaml.str() << lines;
  return dir;
}

}  // namespace numaserve::testing
