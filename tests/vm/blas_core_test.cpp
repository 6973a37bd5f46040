// The BLAS core correction (service/model/blas) against the real OpenBLAS
// that LibTorch links here (Debian's libblas.so.3 alternative), loaded as
// LibTorch loads it. Run twice:
//   blas.core (this machine): whatever the CPU, the process ends on a core
//     of the CPU's best level; a core already there is left alone;
//   vm.blas.unknown_cpu (a VM whose CPUID says Intel family 6 model 207,
//     an Emerald Rapids, with the host's or TCG's features): OpenBLAS 0.3.21
//     does not know the model and chooses Prescott; apply() finds it and
//     switches to the CPU's best core. NUMASERVE_BLAS_UNKNOWN_CPU=1 there.
// Either way an sgemm after apply() is the exact product within the bound
// the arithmetic gives: the kernels switched to run on this CPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "blas/blas.h"

extern "C" {
// The Fortran BLAS interface every libblas.so.3 exports.
using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
                       const float*, const int*, const float*, float*, const int*);
}

namespace numaserve::blas {
namespace {

void* load_blas() {
  // RTLD_GLOBAL: the process's BLAS, as a LibTorch-linked binary has it.
  return dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL);
}

TEST(BlasCore, TheProcessRunsTheCpusBestCoreAndSgemmIsRightOnIt) {
  void* library = load_blas();
  ASSERT_NE(library, nullptr) << dlerror();
  auto corename = reinterpret_cast<char* (*)()>(dlsym(library, "openblas_get_corename"));
  ASSERT_NE(corename, nullptr) << "libblas.so.3 is not OpenBLAS (scripts/install-deps.sh installs libopenblas0-openmp)";
  const std::string before = corename();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const bool unknown_cpu = std::getenv("NUMASERVE_BLAS_UNKNOWN_CPU") != nullptr;

  const Report& report = apply();
  std::cout << "before: " << before << "; after: " << summary(report) << "; " << report.note << "\n";
  EXPECT_EQ(report.core, std::string(corename()));
  if (forced != nullptr) {
    // An operator's OPENBLAS_CORETYPE is theirs: kept, and said.
    EXPECT_FALSE(report.corrected);
    EXPECT_NE(report.note.find("OPENBLAS_CORETYPE"), std::string::npos) << report.note;
  } else {
    ASSERT_FALSE(report.best.empty()) << "an x86-64 CPU without AVX";
    EXPECT_GE(core_level(report.core), core_level(report.best)) << summary(report);
    if (unknown_cpu) {
      EXPECT_EQ(before, "Prescott") << "OpenBLAS 0.3.21 on an Intel model it does not know";
      EXPECT_TRUE(report.corrected) << report.note;
      EXPECT_EQ(report.chosen, "Prescott");
      EXPECT_FALSE(report.warning) << report.note;
    } else if (core_level(before) >= core_level(report.best)) {
      EXPECT_FALSE(report.corrected) << "a core of the CPU's level is left alone: " << report.note;
      EXPECT_EQ(report.core, before);
    }
  }

  auto sgemm = reinterpret_cast<Sgemm>(dlsym(library, "sgemm_"));
  ASSERT_NE(sgemm, nullptr);
  const int m = 67, n = 45, k = 129;
  std::mt19937 rng(3);
  std::normal_distribution<float> value(0.f, 1.f);
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)), c(static_cast<std::size_t>(m * n), NAN);
  for (auto& x : a) x = value(rng);
  for (auto& x : b) x = value(rng);
  const float one = 1, zero = 0;
  // Column-major: C (m x n) = A (m x k) B (k x n).
  sgemm("N", "N", &m, &n, &k, &one, a.data(), &m, b.data(), &k, &zero, c.data(), &m);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double exact = 0, magnitude = 0;
      for (int l = 0; l < k; ++l) {
        const double term = static_cast<double>(a[static_cast<std::size_t>(l * m + i)]) * b[static_cast<std::size_t>(j * k + l)];
        exact += term;
        magnitude += std::abs(term);
      }
      // Any order of k products and sums: gamma_k' with k' = 2k roundings at most.
      const double steps = 2.0 * k, bound = steps * 0x1p-24 / (1 - steps * 0x1p-24) * magnitude;
      ASSERT_LE(std::abs(c[static_cast<std::size_t>(j * m + i)] - exact), bound) << "C[" << i << "][" << j << "] on " << report.core;
    }
  }
}

}  // namespace
}  // namespace numaserve::blas
