#pragma once
// The BLAS LibTorch calls for what numaserve's kernels do not take (linear
// layers of a shape or kind the linear chains leave, the as-written
// forward): which core the library chose, whether that is below what the
// CPU has, and the correction. Torch-free; the library is found at run time
// (dlsym), so the same binary runs over OpenBLAS, the reference BLAS or any
// other.
//
// Why: an OpenBLAS with DYNAMIC_ARCH picks its kernels from the CPU's family
// and model, and a release older than the CPU does not know it. Debian
// bookworm's 0.3.21 runs its SSE3 "Prescott" kernels on Intel models newer
// than it (upstream issue #4267, fixed in 0.3.25): half the forward lost,
// silently. The CPU's own feature bits say which kernels it can run.
//
// Discovery is pure (choose_core from the CPU's features, the library's answer
// and the environment); apply() is the thin acting part, once per process,
// before the first forward.

#include <string>
#include <string_view>
#include <vector>

namespace numaserve::blas {

// What CPUID says, as far as the choice of BLAS kernels goes.
struct CpuFeatures {
  bool amd = false;
  bool avx = false, avx2 = false, fma = false;
  bool avx512 = false;  // F, CD, BW, DQ and VL: OpenBLAS's SkylakeX kernels' set
  bool avx512_bf16 = false;
};
CpuFeatures cpu_features();

// An OpenBLAS core name's instruction level: 0 unknown, 1 SSE, 2 AVX, 3
// AVX2, 4 AVX-512. Case-insensitive ("SkylakeX", "skylakex").
int core_level(std::string_view core);
// The OpenBLAS core that runs best on `cpu` among `available` (the cores
// the library was built with), or "" where none is above SSE.
std::string best_core(const CpuFeatures& cpu, const std::vector<std::string>& available);

struct CoreChoice {
  enum class Action { kKeep, kCorrect, kWarn };
  Action action = Action::kKeep;
  std::string core;    // kCorrect: the core to switch to; kWarn: the one the CPU could run
  std::string reason;  // why, in words a log line can carry
};
// `chosen`: what the library runs now; `forced`: OPENBLAS_CORETYPE as set in
// the environment (a choice an operator made: kept); `switchable`: whether
// the library can be switched in process.
CoreChoice choose_core(const CpuFeatures& cpu, std::string_view chosen, std::string_view forced,
                       const std::vector<std::string>& available, bool switchable);

// What apply() found and did.
struct Report {
  std::string library;  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ...", or "not OpenBLAS (...)"
  std::string core;     // the core running now ("" where the library is not OpenBLAS)
  std::string chosen;   // the library's own choice, when it was corrected
  std::string best;     // the core this CPU could run best
  bool corrected = false;
  std::string note;     // why kept or corrected, or the warning with its remedy
  bool warning = false;
};

// Once per process (later calls return the first one's report): finds the
// BLAS, corrects an OpenBLAS core below this CPU's, logs what it did.
const Report& apply();

// "core Cooperlake", "core Cooperlake (corrected from Prescott)", "core
// Prescott (below this CPU's Cooperlake)"; "" where the BLAS is not OpenBLAS.
std::string summary(const Report& report);

}  // namespace numaserve::blas
