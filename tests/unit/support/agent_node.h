#pragma once
// A synthetic 2-socket node for the agent's cycle tests, and a hints
// directory of the test's own in the temp dir.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "updater/updater.h"

namespace numaserve::agent {

inline updater::UpdaterConfig config_in(const std::filesystem::path& hints) {
  updater::UpdaterConfig config;
  config.discover = discover::DiscoverConfig::of(TopologySource::synthetic("pack:2 numa:1(memory=32GiB) core:8 pu:2"));
  config.node_name = "worker-3";
  config.hints_dir = hints;
  return config;
}

class Agent : public ::testing::Test {
 protected:
  void SetUp() override {
    hints_ = std::filesystem::temp_directory_path() / ("numaserve-agent-" + std::to_string(::getpid()));
    std::filesystem::remove_all(hints_);
  }
  void TearDown() override { std::filesystem::remove_all(hints_); }
  std::filesystem::path hints_;
};

}  // namespace numaserve::agent
