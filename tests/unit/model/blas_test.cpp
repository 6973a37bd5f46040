// The BLAS core's plan (blas.h): the CPUs of a mixed fleet against what an
// OpenBLAS chose on them. The correction itself runs against the real
// library in the service tests (LibTorch brings it) and, on a CPU model
// OpenBLAS 0.3.21 does not know, in the VM test vm.blas.unknown_cpu.
#include "blas/blas.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace numaserve::blas {
namespace {

// Debian bookworm's libopenblas0 0.3.21 (DYNAMIC_ARCH) builds every x86-64 core.
const std::vector<std::string> kDebian = {"Prescott", "Core2",     "Nehalem",  "Sandybridge", "Bulldozer", "Haswell",
                                          "Zen",      "SkylakeX", "Cooperlake"};

CpuFeatures intel_sapphire_rapids() { return {false, true, true, true, true, true}; }  // AVX-512 with BF16
CpuFeatures intel_skylake_sp() { return {false, true, true, true, true, false}; }
CpuFeatures amd_zen3() { return {true, true, true, true, false, false}; }
CpuFeatures intel_haswell() { return {false, true, true, true, false, false}; }

TEST(BlasPlan, AnEmeraldRapidsOnPrescottKernelsIsSwitchedToCooperlake) {
  const CoreChoice p = choose_core(intel_sapphire_rapids(), "Prescott", "", kDebian, true);
  EXPECT_EQ(p.action, CoreChoice::Action::kCorrect);
  EXPECT_EQ(p.core, "Cooperlake");
  EXPECT_NE(p.reason.find("below what this CPU runs"), std::string::npos) << p.reason;
}

TEST(BlasPlan, AKnownCpuOnItsOwnKernelsIsLeftAlone) {
  EXPECT_EQ(choose_core(intel_sapphire_rapids(), "Cooperlake", "", kDebian, true).action, CoreChoice::Action::kKeep);
  EXPECT_EQ(choose_core(intel_skylake_sp(), "SkylakeX", "", kDebian, true).action, CoreChoice::Action::kKeep);
  EXPECT_EQ(choose_core(amd_zen3(), "Zen", "", kDebian, true).action, CoreChoice::Action::kKeep);
  // Equal level: Haswell's kernels on a Zen are not a fallback.
  EXPECT_EQ(choose_core(amd_zen3(), "Haswell", "", kDebian, true).action, CoreChoice::Action::kKeep);
  EXPECT_EQ(choose_core(intel_haswell(), "Haswell", "", kDebian, true).action, CoreChoice::Action::kKeep);
}

TEST(BlasPlan, EachFallbackGoesToTheWidestCoreTheCpuRunsAndTheLibraryHas) {
  EXPECT_EQ(choose_core(intel_skylake_sp(), "Prescott", "", kDebian, true).core, "SkylakeX");
  EXPECT_EQ(choose_core(amd_zen3(), "Sandybridge", "", kDebian, true).core, "Zen");
  EXPECT_EQ(choose_core(intel_haswell(), "Nehalem", "", kDebian, true).core, "Haswell");
  // A library built without Cooperlake: SkylakeX.
  EXPECT_EQ(choose_core(intel_sapphire_rapids(), "Prescott", "", {"Prescott", "Haswell", "SkylakeX"}, true).core, "SkylakeX");
}

TEST(BlasPlan, AnOperatorsOpenblasCoretypeIsKept) {
  const CoreChoice p = choose_core(intel_sapphire_rapids(), "Haswell", "Haswell", kDebian, true);
  EXPECT_EQ(p.action, CoreChoice::Action::kKeep);
  EXPECT_NE(p.reason.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << p.reason;
}

TEST(BlasPlan, ALibraryThatCannotBeSwitchedIsAWarningNamingTheRemedy) {
  const CoreChoice p = choose_core(intel_sapphire_rapids(), "Prescott", "", kDebian, false);
  EXPECT_EQ(p.action, CoreChoice::Action::kWarn);
  EXPECT_NE(p.reason.find("OPENBLAS_CORETYPE=Cooperlake"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("0.3.25"), std::string::npos) << p.reason;
}

TEST(BlasPlan, CoreLevelsAreCaseInsensitiveAndUnknownNamesAreZero) {
  EXPECT_EQ(core_level("skylakex"), 4);
  EXPECT_EQ(core_level("COOPERLAKE"), 4);
  EXPECT_EQ(core_level("Haswell"), 3);
  EXPECT_EQ(core_level("Sandybridge"), 2);
  EXPECT_EQ(core_level("Prescott"), 1);
  EXPECT_EQ(core_level("Loongson3R4"), 0);
  EXPECT_EQ(best_core(CpuFeatures{}, kDebian), "");
}

}  // namespace
}  // namespace numaserve::blas
