#pragma once
// A fresh directory for the running test, under the system's temp dir and
// named after the process and the test (tests of one binary may run in
// parallel processes), removed when the test ends.

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace numaserve::testing_support {

class TestDir {
 public:
  explicit TestDir(const std::string& prefix)
      : path_(std::filesystem::temp_directory_path() /
              (prefix + "-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace numaserve::testing_support
