#include "measure.h"

#include <dlfcn.h>

#include <chrono>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include "numa/numa.h"
#include "numaserve/common/duration.h"

namespace numaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The Fortran BLAS entry point, from the library the alternatives system
// names for libblas.so.3 — the one LibTorch itself calls.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);

}  // namespace

int fail(const std::string& message) {
  std::cerr << "numaserve-bench: " << message << "\n";
  return 1;
}

json on_pinned_thread(const std::string& cpus, const std::function<json()>& body) {
  json out;
  std::thread worker([&] {
    if (!cpus.empty()) {
      auto set = numaserve::CpuSet::parse_list(cpus);
      if (!set || !numaserve::numa::bind_current_thread(*set)) {
        out = {{"error", "cannot pin to " + cpus}};
        return;
      }
    }
    out = body();
  });
  worker.join();
  return out;
}

int print(const json& out) {
  if (out.contains("error")) return fail(out["error"].get<std::string>());
  std::cout << out.dump() << "\n";
  return 0;
}

double sgemm_gflops(int n, double seconds, std::size_t* calls_out) {
  void* blas = dlopen("libblas.so.3", RTLD_NOW);
  auto sgemm = blas ? reinterpret_cast<SgemmFn>(dlsym(blas, "sgemm_")) : nullptr;
  if (sgemm == nullptr) return 0;
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  const float alpha = 1, beta = 0;
  std::size_t calls = 0;
  const auto start = Clock::now();
  const auto end = start + numaserve::to_duration(seconds);
  while (Clock::now() < end) {
    sgemm("N", "N", &n, &n, &n, &alpha, a.data(), &n, b.data(), &n, &beta, c.data(), &n);
    ++calls;
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  if (calls_out != nullptr) *calls_out = calls;
  return 2.0 * n * n * static_cast<double>(n) * static_cast<double>(calls) / took / 1e9;
}

// Rows independent, as a bag's are, so many misses are in flight at once.
double gather_bytes_per_s(double seconds) {
  constexpr std::size_t kRow = 32;  // floats: 128 bytes
  const std::size_t rows = (512u << 20) / (kRow * sizeof(float));
  std::vector<float> table(rows * kRow, 1.f);
  std::mt19937_64 rng(5);
  std::vector<std::uint32_t> order(1 << 20);
  for (auto& i : order) i = static_cast<std::uint32_t>(rng() % rows);
  float sum[kRow] = {};
  std::size_t gathered = 0;
  const auto start = Clock::now();
  while (Clock::now() - start < numaserve::to_duration(seconds)) {
    for (const auto i : order) {
      const float* row = table.data() + static_cast<std::size_t>(i) * kRow;
      for (std::size_t d = 0; d < kRow; ++d) sum[d] += row[d];
    }
    gathered += order.size();
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  volatile float keep = sum[0];  // the sums are the point of the loop: keep them
  (void)keep;
  return static_cast<double>(gathered * kRow * sizeof(float)) / took;
}

}  // namespace numaserve::bench
