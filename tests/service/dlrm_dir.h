#pragma once
// The DLRM-style model directories dlrm_models.py (beside this file)
// scripts with PyTorch, written once per test binary.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "served.h"

namespace numaserve::testing {

inline const std::filesystem::path& scripted_dir() {
  static const std::filesystem::path dir = [] {
    auto d = make_temp_dir("numaserve-dlrm");
    const std::string command = "/usr/bin/python3 " + std::string(NUMASERVE_SOURCE_DIR) + "/tests/service/dlrm_models.py " + d.string();
    if (std::system(command.c_str()) != 0) ADD_FAILURE() << command << " failed";
    return d;
  }();
  return dir;
}

}  // namespace numaserve::testing
