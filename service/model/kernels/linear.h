#pragma once
// Chains of linear layers, y = act(x W^T + b) one layer after another (a
// ranking model's bottom and top MLPs), on weights packed once at load.
// Torch-free, as kernels.h: model/graph.cpp wraps a chain as the
// numaserve::linear_chain op and keeps the packed weights as its constants.
//
// Why not the BLAS: at a ranking model's shapes (tens to a few hundred rows,
// layers of 13 to 1,024 inputs) a BLAS call spends much of its time outside
// the product, its kernels are the library's runtime choice (Debian's
// OpenBLAS 0.3.21 falls back to SSE3 on CPUs newer than it), and its
// remainder kernels sum some rows in another order, so a row's score
// depended on how many rows it was batched with.
//
// Batch invariance, by construction: every output element is
//   acc = 0; for k in 0..K-1 (fp32) or each pair of k (bf16): acc += x*w
//   y = acc + bias; y = max(0, y) for ReLU
// one fused multiply-add after another in the order of k (a narrow layer:
// 16 such sums, folded in a fixed tree), the same on every path and for
// every row count: a row's output does not depend on the rows beside it,
// and the fp32 paths (AVX-512, AVX2 and portable) agree bit for bit. The bf16 path multiplies pairs (AVX512_BF16's vdpbf16ps: the odd
// element of a pair first, each product added with one rounding), its
// inputs rounded to bf16 at each layer; its portable reference computes the
// same steps in software.
//
// A narrow layer (at most kNarrowOutputs outputs: a score's last layer)
// would use one lane of a panel's 16: each of its outputs is instead 16
// lanes each summing every 16th product (or pair of products) in the order
// of k, then the lanes added in a fixed tree, the same on every path.
//
// Packed layout (one for every path): a layer's outputs in panels of 16;
// fp32: panel p holds W[16p + j][k] at [p][k][j]; bf16: the pair (W[n][2i],
// W[n][2i+1]) at [p][i][j][0..1]. Columns past the outputs and the odd
// input's missing pair element are zeros. A narrow layer: W row by row,
// each row padded with zeros to a multiple of 16 floats or 32 bf16.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/kernels.h"

namespace numaserve::kernels {

enum class LinearPrecision { kFp32, kBf16 };

// The path a chain of `precision` runs on when the fused ops run on `isa`:
// "avx512", "avx2" or "portable" for fp32; "avx512_bf16" or "portable" for
// bf16 (bf16 products need AVX512_BF16; the portable path is the reference).
std::string_view linear_path(Isa isa, LinearPrecision precision);

inline constexpr std::int64_t kPanel = 16;
inline constexpr std::int64_t kNarrowOutputs = 4;

// Elements (floats for fp32, uint16 for bf16) of a packed layer.
std::size_t packed_elements(std::int64_t inputs, std::int64_t outputs, LinearPrecision precision);
// W [outputs][inputs], row-major, packed into `out` (packed_elements long).
void pack_fp32(const float* weight, std::int64_t inputs, std::int64_t outputs, float* out);
void pack_bf16(const float* weight, std::int64_t inputs, std::int64_t outputs, std::uint16_t* out);

struct LinearLayer {
  const void* packed = nullptr;  // float* (fp32) or std::uint16_t* (bf16)
  const float* bias = nullptr;   // [outputs], or null
  std::int64_t inputs = 0, outputs = 0;
  bool relu = false;
  LinearPrecision precision = LinearPrecision::kFp32;
};

struct LinearChain {
  std::vector<LinearLayer> layers;  // each layer's inputs are the outputs of the one before
};

// Rows [begin, end) of in [rows][layers.front().inputs] through the chain
// into out [rows][layers.back().outputs]. Any split of the rows gives the
// same bits for each row. Scratch is the calling thread's own.
void run_chain(Isa isa, const LinearChain& chain, const float* in, float* out, std::int64_t begin, std::int64_t end);

}  // namespace numaserve::kernels
