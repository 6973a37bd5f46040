#pragma once
// Golden-output checks, hwloc's way: the expected text lives in a file under
// tests/fixtures; NUMASERVE_UPDATE_GOLDEN=1 rewrites it so that an intended
// change is reviewed as a diff.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "numaserve/common/text_file.h"

namespace numaserve::testing {

inline void expect_matches_golden(const std::string& actual, const std::filesystem::path& golden) {
  if (const char* update = std::getenv("NUMASERVE_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::filesystem::create_directories(golden.parent_path());
    std::ofstream(golden) << actual;
    return;
  }
  auto expected = read_text_file(golden);
  ASSERT_TRUE(expected.has_value())
      << expected.error().message << " (create it with NUMASERVE_UPDATE_GOLDEN=1 and review it)";
  EXPECT_EQ(actual, *expected) << "output changed; if intended, rerun with NUMASERVE_UPDATE_GOLDEN=1 "
                               << "and review the diff of " << golden;
}

}  // namespace numaserve::testing
