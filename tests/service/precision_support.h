#pragma once
// What the bf16 and int8 tests share: a load at a precision, a CPU without
// an instruction family for one scope (the service's NUMASERVE_CPU_BF16 and
// NUMASERVE_CPU_INT8 switches), why this CPU runs no such products (asked
// of the load itself: the machines these run on differ from day to day),
// and how far two score vectors are apart.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "demo_dir.h"
#include "model/model.h"

namespace numaserve::testing {

inline Result<std::unique_ptr<model::TorchModel>> load(const std::filesystem::path& dir, std::optional<features::Precision> precision,
                                                       std::optional<features::TablePrecision> tables = std::nullopt) {
  model::LoadOptions options;
  options.precision = precision;
  options.embedding_precision = tables;
  return model::TorchModel::load(dir, options);
}

// `switch_name`=off for one scope: a CPU without those instructions.
struct CpuWithout {
  explicit CpuWithout(const char* switch_name) : name(switch_name) { setenv(name, "off", 1); }
  ~CpuWithout() { unsetenv(name); }
  CpuWithout(const CpuWithout&) = delete;
  CpuWithout& operator=(const CpuWithout&) = delete;
  const char* name;
};

// Why this CPU serves no `precision` layers (empty: it does): the demo
// ranker's load refusal, its tables left fp32.
inline const std::string& not_served_here(features::Precision precision) {
  static std::map<features::Precision, std::string> why;
  if (auto known = why.find(precision); known != why.end()) return known->second;
  auto probe = load(demo_dir() / "ranker_a", precision, features::TablePrecision::kFp32);
  return why[precision] = !probe ? probe.error().message : std::string();
}

#define SKIP_WITHOUT(precision, what)                                                       \
  if (const auto& why_not = ::numaserve::testing::not_served_here(precision); !why_not.empty()) \
  GTEST_SKIP() << "no " what " here: " << why_not

inline double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double out = 0;
  for (std::size_t i = 0; i < a.size(); ++i) out = std::max(out, std::abs(static_cast<double>(a[i]) - b[i]));
  return out;
}

}  // namespace numaserve::testing
