#pragma once
// The fused ops' switches, process-wide (ops.cpp): which kernel path they
// run and whether repeated bags are reused. Torch-free, so the benchmark
// and the tests set them without LibTorch's headers.

#include <string>

#include "kernels/linear.h"
#include "numaserve/common/result.h"

namespace numaserve::graph {

// The fused ops' kernel path on this CPU: "avx512", "avx2" or "portable".
std::string kernel_isa();
// Narrows it to another path this CPU runs, for the benchmark to measure
// what a machine without AVX-512 would get; serve always runs the best.
Status set_kernel_isa(const std::string& name);
// Off: every embedding bag is pooled, also one that repeats the row
// before's ids (a request's user bags), for the benchmark to measure what
// reusing them saves; serve always reuses.
void set_bag_reuse(bool reuse);

// The path the linear chains run on now (kernels/linear.h linear_path).
std::string linear_kernels(kernels::LinearPrecision precision);

}  // namespace numaserve::graph
