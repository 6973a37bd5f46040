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
//
// int8 (AVX512_VNNI's vpdpbusd, or the portable reference): weights
// quantized once at pack, each layer's input rows when it runs (no
// calibration: every row has its own scale), the product in integers:
//   weights, per output n: s_n = max_k |W[n][k]| / 127; code = W / s_n
//     rounded to nearest even, clamped to [-127, 127] (a zero row: s_n = 0,
//     codes 0); colsum_n = sum_k code.
//   a row x, per layer: amax = max_k |x_k|, a = amax / 127, inv = 127.f /
//     amax (float divisions, once a row); q_k = nearbyint(x_k * inv)
//     clamped to [-127, 127], u_k = q_k + 128 (vpdpbusd multiplies
//     unsigned bytes by signed ones).
//   acc = sum_k u_k * code_nk in int32: exact (kInt8MaxInputs), so in
//     any order; c = acc - 128 colsum_n (= sum_k q_k code_nk).
//   y = fma(float(c), a * s_n, bias_n), or float(c) * (a * s_n) with no
//     bias; then ReLU. The output is fp32: the next layer quantizes it anew.
// Both paths do the same float operations (their roundings to an integer
// both in the current mode: to nearest even), so they agree bit for bit, and
// a row's scale is its own, so its output does not depend on the rows
// beside it. A row with a NaN or an infinity among its inputs gets NaN
// outputs (a = NaN, codes 0); a row whose 127 / amax is not finite (zeros,
// or amax under about 3.7e-37) gets codes 0 and a = 0: its outputs are the
// bias. A weight row with a NaN or an infinity: s_n = NaN, codes 0 (that
// output is NaN). No AMX-INT8 or AVX-VNNI (ymm) path: no machine here has
// them to test one on.
//
// Packed int8 (bytes): the codes, then s_n (float) for each output, then
// colsum_n (int32) for each output. Codes in panels as vpdpbusd takes
// them: panel p holds W[16p + j][4i + t] at [p][i][j][t], k padded with
// zero codes to a multiple of 4; a narrow layer row by row, each row
// padded with zero codes to a multiple of 64. Both are whole 4-byte words,
// so the floats and int32s after them are too.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernels.h"

namespace numaserve::kernels {

enum class LinearPrecision { kFp32, kBf16, kInt8 };

// The path a chain of `precision` runs on when the fused ops run on `isa`:
// "avx512", "avx2" or "portable" for fp32; "avx512_bf16" or "portable" for
// bf16 (bf16 products need AVX512_BF16); "avx512_vnni" or "portable" for
// int8 (AVX-512 with AVX512_VNNI). The portable paths are the references.
std::string_view linear_path(Isa isa, LinearPrecision precision);

inline constexpr std::int64_t kPanel = 16;
inline constexpr std::int64_t kNarrowOutputs = 4;
// The widest int8 layer: 255 x 127 x 65,536 still fits an int32 sum.
inline constexpr std::int64_t kInt8MaxInputs = 65536;

// Elements (floats for fp32, uint16 for bf16, bytes for int8) of a packed layer.
std::size_t packed_elements(std::int64_t inputs, std::int64_t outputs, LinearPrecision precision);
// W [outputs][inputs], row-major, packed into `out` (packed_elements long).
void pack_fp32(const float* weight, std::int64_t inputs, std::int64_t outputs, float* out);
void pack_bf16(const float* weight, std::int64_t inputs, std::int64_t outputs, std::uint16_t* out);
void pack_int8(const float* weight, std::int64_t inputs, std::int64_t outputs, std::int8_t* out);
// The weights a packed int8 layer multiplies by, code * s_n, into weight
// [outputs][inputs]: what ATen runs where an input is one the kernels do not take.
void unpack_int8(const void* packed, std::int64_t inputs, std::int64_t outputs, float* weight);

// Whether this CPU multiplies int8 in hardware, which an int8 model needs
// to be worth serving: AVX512_VNNI (CPUID.(7,0):ECX[11]) with AVX-512 F, BW
// and VL. `instructions` names it ("avx512_vnni"); `missing` what it lacks.
// NUMASERVE_CPU_INT8=off answers no (the tests of the fallback). Asked anew
// at each call.
struct Int8Support {
  bool usable = false;
  std::string instructions;
  std::string missing;
};
Int8Support int8_support();

struct LinearLayer {
  const void* packed = nullptr;  // float* (fp32), std::uint16_t* (bf16) or pack_int8's bytes
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
