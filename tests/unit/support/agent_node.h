#pragma once
// A synthetic 2-socket node for the agent's cycle tests, and a hints
// directory of the test's own in the temp dir.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_dir.h"
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
  testing_support::TestDir dir_{"numaserve-agent"};
  // Not there yet: the agent makes its hints directory, as on a node.
  const std::filesystem::path hints_ = dir_.path() / "hints";
};

}  // namespace numaserve::agent
