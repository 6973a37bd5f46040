// Each path is compiled for its own instruction set (GCC's target
// attribute), as in kernels.cpp. A tile is up to 8 rows (6 on AVX2) by one
// or two 16-output panels, its accumulators in registers for the whole
// reduction: every output element is one chain of fused multiply-adds in
// the order of k, whatever the tile's shape, so the row count changes no bit.
#include "kernels/linear.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

// GCC 12's AVX-512 headers initialize their "undefined" vectors from
// themselves and warn about it wherever one inlines (as in kernels.cpp;
// the int8 code avoids the ones that warn outright: _mm512_slli_epi32 and
// _mm512_cvtepi32_ps, zero-masked instead, and _mm512_reduce_add_epi32).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace numaserve::kernels {
namespace {

// Rows run through the whole chain together: their intermediate outputs
// stay in the core's cache between layers.
constexpr std::int64_t kBlock = 32;

std::int64_t panels(std::int64_t outputs) { return (outputs + kPanel - 1) / kPanel; }
std::int64_t pairs(std::int64_t inputs) { return (inputs + 1) / 2; }
std::int64_t round_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

// max(0, y) as vmaxps(0, y) computes it: a NaN stays a NaN, -0 stays -0.
inline float relu(float y) { return 0.f > y ? 0.f : y; }

// A narrow layer (a score's last layer: 1 output) would use one lane of 16
// in a panel: its rows are reduced along k instead, 16 lanes each summing
// every 16th product (fp32) or pair of products (bf16) in the order of k,
// then the lanes added in a fixed tree (fold_lanes). Packed row by row, each
// row's inputs padded with zeros to a whole vector: 16 floats or 32 bf16.
bool narrow(std::int64_t outputs) { return outputs <= kNarrowOutputs; }
std::int64_t narrow_depth(std::int64_t inputs, LinearPrecision precision) {
  return round_up(inputs, precision == LinearPrecision::kBf16 ? 2 * kPanel : kPanel);
}

// The lanes' tree, the same on every path: lane i + lane i+8, then i + i+4,
// i + i+2, and the last two.
float fold_lanes(const float* lane) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = lane[i] + lane[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

float finish(const LinearLayer& layer, std::int64_t n, float acc) {
  const float y = layer.bias != nullptr ? acc + layer.bias[n] : acc;
  return layer.relu ? relu(y) : y;
}

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return best_isa() == Isa::kAvx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);  // CPUID.(7,1):EAX[5]
  }();
  return has;
}

bool cpu_has_avx512_vnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((c >> 11) & 1);  // CPUID.(7,0):ECX[11]
}

bool vnni_usable() {
  static const bool usable = best_isa() == Isa::kAvx512 && cpu_has_avx512_vnni();
  return usable;
}

// The rows of one layer: x [rows][inputs] (row stride ldx) into y
// [rows][outputs] (stride ldy); a bf16 layer reads x rounded to bf16 from
// narrow, an int8 layer its codes u (and each row's scale a) from codes,
// row stride ldn: the inputs rounded up to pairs, or to the packed depth.
struct Rows {
  const float* x;
  std::int64_t ldx;
  std::int64_t rows;
  float* y;
  std::int64_t ldy;
  const std::uint16_t* narrow = nullptr;
  std::int64_t ldn = 0;
  const std::uint8_t* codes = nullptr;
  const float* scale = nullptr;
};

// --- portable: the specification of the fp32 paths.

void layer_portable(const LinearLayer& layer, const Rows& r) {
  const auto* w = static_cast<const float*>(layer.packed);
  const std::int64_t k_count = layer.inputs;
  for (std::int64_t m = 0; m < r.rows; ++m) {
    for (std::int64_t n = 0; n < layer.outputs; ++n) {
      const float* panel = w + (n / kPanel) * k_count * kPanel + n % kPanel;
      float acc = 0;
      for (std::int64_t k = 0; k < k_count; ++k) acc = std::fma(r.x[m * r.ldx + k], panel[k * kPanel], acc);
      float y = layer.bias != nullptr ? acc + layer.bias[n] : acc;
      r.y[m * r.ldy + n] = layer.relu ? relu(y) : y;
    }
  }
}

// --- AVX2 + FMA: a panel is two 8-lane vectors; up to 6 rows a tile.

template <int MR>
__attribute__((target("avx2,fma"))) void tile_avx2(const LinearLayer& layer, const Rows& r, std::int64_t m0, std::int64_t p) {
  const std::int64_t k_count = layer.inputs;
  const float* w = static_cast<const float*>(layer.packed) + p * k_count * kPanel;
  __m256 acc[MR][2];
  // Every loop over the tile's rows and panels unrolled: the accumulators
  // then live in registers, never in memory.
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const float* x = r.x + m0 * r.ldx;
  for (std::int64_t k = 0; k < k_count; ++k) {
    const __m256 w0 = _mm256_loadu_ps(w + k * kPanel), w1 = _mm256_loadu_ps(w + k * kPanel + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xi = _mm256_broadcast_ss(x + i * r.ldx + k);
      acc[i][0] = _mm256_fmadd_ps(xi, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xi, w1, acc[i][1]);
    }
  }
  const std::int64_t n0 = p * kPanel, width = std::min<std::int64_t>(kPanel, layer.outputs - n0);
  alignas(32) float bias[kPanel] = {};
  if (layer.bias != nullptr) std::memcpy(bias, layer.bias + n0, sizeof(float) * static_cast<std::size_t>(width));
  const __m256 b0 = _mm256_load_ps(bias), b1 = _mm256_load_ps(bias + 8), zero = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    __m256 y0 = acc[i][0], y1 = acc[i][1];
    if (layer.bias != nullptr) {
      y0 = _mm256_add_ps(y0, b0);
      y1 = _mm256_add_ps(y1, b1);
    }
    if (layer.relu) {
      y0 = _mm256_max_ps(zero, y0);
      y1 = _mm256_max_ps(zero, y1);
    }
    float* out = r.y + (m0 + i) * r.ldy + n0;
    if (width == kPanel) {
      _mm256_storeu_ps(out, y0);
      _mm256_storeu_ps(out + 8, y1);
    } else {
      alignas(32) float row[kPanel];
      _mm256_store_ps(row, y0);
      _mm256_store_ps(row + 8, y1);
      std::memcpy(out, row, sizeof(float) * static_cast<std::size_t>(width));
    }
  }
}

template <int MR>
__attribute__((target("avx2,fma"))) void rows_avx2(const LinearLayer& layer, const Rows& r, std::int64_t m0) {
  for (std::int64_t p = 0; p < panels(layer.outputs); ++p) tile_avx2<MR>(layer, r, m0, p);
}

void layer_avx2(const LinearLayer& layer, const Rows& r) {
  std::int64_t m = 0;
  for (; m + 6 <= r.rows; m += 6) rows_avx2<6>(layer, r, m);
  switch (r.rows - m) {
    case 5: return rows_avx2<5>(layer, r, m);
    case 4: return rows_avx2<4>(layer, r, m);
    case 3: return rows_avx2<3>(layer, r, m);
    case 2: return rows_avx2<2>(layer, r, m);
    case 1: return rows_avx2<1>(layer, r, m);
    default: return;
  }
}

// --- AVX-512: up to 8 rows by two panels (16 accumulators) a tile.

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __mmask16 columns_mask(std::int64_t width) {
  return width >= kPanel ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << width) - 1);
}

// The fp32 and bf16 tiles' accumulators made outputs: the sum plus the bias.
struct AddBias {
  struct Panel {};
  Panel panel(const LinearLayer&, std::int64_t, __mmask16) const { return {}; }
  __attribute__((target("avx512f,avx512bw,avx512vl"))) __m512 operator()(const LinearLayer& layer, Panel, int, __m512 acc,
                                                                      __m512 bias) const {
    return layer.bias != nullptr ? _mm512_add_ps(acc, bias) : acc;
  }
};

// The epilogue shared by the tiles: each accumulator made an output
// (Finish: AddBias, or Int8Finish), ReLU, the panel's columns stored.
template <int MR, int NV, typename Acc, typename Finish>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void store_avx512(const LinearLayer& layer, const Rows& r, std::int64_t m0,
                                                                    std::int64_t p, Acc (&acc)[MR][NV], const Finish& finish) {
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) {
    const std::int64_t n0 = (p + v) * kPanel;
    const __mmask16 mask = columns_mask(layer.outputs - n0);
    const __m512 bias = layer.bias != nullptr ? _mm512_maskz_loadu_ps(mask, layer.bias + n0) : zero;
    const auto panel = finish.panel(layer, n0, mask);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512 y = finish(layer, panel, i, acc[i][v], bias);
      if (layer.relu) y = _mm512_max_ps(zero, y);
      _mm512_mask_storeu_ps(r.y + (m0 + i) * r.ldy + n0, mask, y);
    }
  }
}

template <int MR, int NV>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void tile_avx512(const LinearLayer& layer, const Rows& r, std::int64_t m0,
                                                                   std::int64_t p) {
  const std::int64_t k_count = layer.inputs;
  const float* w = static_cast<const float*>(layer.packed) + p * k_count * kPanel;
  __m512 acc[MR][NV];
  // Every loop over the tile's rows and panels unrolled: the accumulators
  // then live in registers, never in memory.
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const float* x = r.x + m0 * r.ldx;
  for (std::int64_t k = 0; k < k_count; ++k) {
    __m512 wv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_ps(w + v * k_count * kPanel + k * kPanel);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i * r.ldx + k]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(xi, wv[v], acc[i][v]);
    }
  }
  store_avx512<MR, NV>(layer, r, m0, p, acc, AddBias{});
}

// Two panels a tile while two are left, then the last one alone.
template <int MR, template <int, int> class Tile>
void rows_of_panels(const LinearLayer& layer, const Rows& r, std::int64_t m0) {
  const std::int64_t count = panels(layer.outputs);
  std::int64_t p = 0;
  for (; p + 2 <= count; p += 2) Tile<MR, 2>::run(layer, r, m0, p);
  if (p < count) Tile<MR, 1>::run(layer, r, m0, p);
}

template <int MR, int NV>
struct Fp32Tile {
  static void run(const LinearLayer& layer, const Rows& r, std::int64_t m0, std::int64_t p) { tile_avx512<MR, NV>(layer, r, m0, p); }
};

template <template <int, int> class Tile>
void layer_rows8(const LinearLayer& layer, const Rows& r) {
  std::int64_t m = 0;
  for (; m + 8 <= r.rows; m += 8) rows_of_panels<8, Tile>(layer, r, m);
  switch (r.rows - m) {
    case 7: return rows_of_panels<7, Tile>(layer, r, m);
    case 6: return rows_of_panels<6, Tile>(layer, r, m);
    case 5: return rows_of_panels<5, Tile>(layer, r, m);
    case 4: return rows_of_panels<4, Tile>(layer, r, m);
    case 3: return rows_of_panels<3, Tile>(layer, r, m);
    case 2: return rows_of_panels<2, Tile>(layer, r, m);
    case 1: return rows_of_panels<1, Tile>(layer, r, m);
    default: return;
  }
}

// --- bf16: x rounded to bf16 (as to_bf16), read as pairs; each pair added
// as vdpbf16ps does: the odd element's product first.

void layer_bf16_portable(const LinearLayer& layer, const Rows& r) {
  const auto* w = static_cast<const std::uint16_t*>(layer.packed);
  const std::int64_t k2 = pairs(layer.inputs);
  for (std::int64_t m = 0; m < r.rows; ++m) {
    for (std::int64_t n = 0; n < layer.outputs; ++n) {
      const std::uint16_t* panel = w + (n / kPanel) * k2 * kPanel * 2 + (n % kPanel) * 2;
      const std::uint16_t* row = r.narrow + m * r.ldn;
      float acc = 0;
      for (std::int64_t i = 0; i < k2; ++i) {
        acc = std::fma(from_bf16(row[2 * i + 1]), from_bf16(panel[i * kPanel * 2 + 1]), acc);
        acc = std::fma(from_bf16(row[2 * i]), from_bf16(panel[i * kPanel * 2]), acc);
      }
      float y = layer.bias != nullptr ? acc + layer.bias[n] : acc;
      r.y[m * r.ldy + n] = layer.relu ? relu(y) : y;
    }
  }
}

// --- int8 (linear.h has the numerics). A packed layer's parts: the codes
// (int8_at: where W[n][k]'s code is), then s_n and colsum_n, read unaligned.

std::int64_t int8_depth(std::int64_t inputs, std::int64_t outputs) { return round_up(inputs, narrow(outputs) ? 4 * kPanel : 4); }

std::int64_t int8_code_bytes(std::int64_t inputs, std::int64_t outputs) {
  return int8_depth(inputs, outputs) * (narrow(outputs) ? outputs : panels(outputs) * kPanel);
}

std::int64_t int8_at(std::int64_t depth, std::int64_t outputs, std::int64_t n, std::int64_t k) {
  if (narrow(outputs)) return n * depth + k;
  return (n / kPanel) * depth * kPanel + (k / 4) * kPanel * 4 + (n % kPanel) * 4 + k % 4;
}

struct Int8Packed {
  const std::int8_t* codes;
  const std::int8_t* scales;   // float [outputs]
  const std::int8_t* colsums;  // std::int32_t [outputs]
  Int8Packed(const void* packed, std::int64_t inputs, std::int64_t outputs)
      : codes(static_cast<const std::int8_t*>(packed)),
        scales(codes + int8_code_bytes(inputs, outputs)),
        colsums(scales + 4 * outputs) {}
  float scale(std::int64_t n) const {
    float s = 0;
    std::memcpy(&s, scales + 4 * n, sizeof s);
    return s;
  }
  std::int32_t colsum(std::int64_t n) const {
    std::int32_t c = 0;
    std::memcpy(&c, colsums + 4 * n, sizeof c);
    return c;
  }
};

// An input row's scale a from its largest magnitude, and 127 / amax:
// `quantize` false where its codes are all 0 (a non-finite input: a = NaN;
// 127 / amax not finite: a = 0). Shared by both paths, as is int8_output.
struct RowScale {
  float a = 0, inv = 0;
  bool quantize = false;
};
RowScale row_scale(float amax, bool finite) {
  if (!finite) return {std::numeric_limits<float>::quiet_NaN(), 0, false};
  const float inv = 127.f / amax;
  if (!(inv <= FLT_MAX)) return {};
  return {amax / 127.f, inv, true};
}

std::int8_t code_of(float x, float inv) { return static_cast<std::int8_t>(std::clamp(std::nearbyint(x * inv), -127.f, 127.f)); }

// x's `inputs` values as codes u = q + 128 into u [depth] (past the inputs:
// 128, q = 0), and the row's scale into *a.
void quantize_portable(const float* x, std::int64_t inputs, std::int64_t depth, std::uint8_t* u, float* a) {
  float amax = 0;
  bool finite = true;
  for (std::int64_t k = 0; k < inputs; ++k) {
    const float ax = std::abs(x[k]);
    finite = finite && ax <= FLT_MAX;
    amax = ax > amax ? ax : amax;
  }
  const RowScale s = row_scale(amax, finite);
  *a = s.a;
  for (std::int64_t k = 0; k < depth; ++k) u[k] = static_cast<std::uint8_t>((k < inputs && s.quantize ? code_of(x[k], s.inv) : 0) + 128);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_avx512(const float* x, std::int64_t inputs, std::int64_t depth,
                                                                        std::uint8_t* u, float* a) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 infinite = 0;  // the lanes that saw a NaN or an infinity
  for (std::int64_t k = 0; k < inputs; k += kPanel) {
    const __m512 ax = _mm512_abs_ps(_mm512_maskz_loadu_ps(columns_mask(inputs - k), x + k));
    infinite |= _mm512_cmp_ps_mask(ax, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
    amax = _mm512_max_ps(amax, ax);
  }
  const RowScale s = row_scale(_mm512_reduce_max_ps(amax), infinite == 0);
  *a = s.a;
  std::int64_t k = 0;
  if (s.quantize) {
    // vcvtps2dq rounds as nearbyint does (to nearest even, MXCSR's default mode).
    for (; k < inputs; k += kPanel) {
      const __mmask16 mask = columns_mask(inputs - k);
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + k), _mm512_set1_ps(s.inv)));
      q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
      _mm512_mask_cvtepi32_storeu_epi8(u + k, mask, _mm512_add_epi32(q, _mm512_set1_epi32(128)));
    }
    k = inputs;
  }
  std::memset(u + k, 128, static_cast<std::size_t>(depth - k));
}

float int8_output(const LinearLayer& layer, const Int8Packed& packed, std::int64_t n, std::int32_t acc, float a) {
  const float c = static_cast<float>(acc - 128 * packed.colsum(n));
  const float scale = a * packed.scale(n);
  const float y = layer.bias != nullptr ? std::fma(c, scale, layer.bias[n]) : c * scale;
  return layer.relu ? relu(y) : y;
}

// The portable reference: each output's codes one by one.
void layer_int8_portable(const LinearLayer& layer, const Rows& r) {
  const Int8Packed packed(layer.packed, layer.inputs, layer.outputs);
  for (std::int64_t m = 0; m < r.rows; ++m) {
    for (std::int64_t n = 0; n < layer.outputs; ++n) {
      std::int32_t acc = 0;
      for (std::int64_t k = 0; k < layer.inputs; ++k) acc += r.codes[m * r.ldn + k] * packed.codes[int8_at(r.ldn, layer.outputs, n, k)];
      r.y[m * r.ldy + n] = int8_output(layer, packed, n, acc, r.scale[m]);
    }
  }
}

// The int8 tile's accumulators made outputs, as int8_output: c = acc - 128
// colsum, then fma(float(c), a * s_n, bias).
struct Int8Finish {
  Int8Packed packed;
  const float* a;  // the tile's rows' scales
  struct Panel {
    __m512 s;
    __m512i offset;  // 128 colsum
  };
  __attribute__((target("avx512f,avx512bw,avx512vl"))) Panel panel(const LinearLayer&, std::int64_t n0, __mmask16 mask) const {
    const __m512i colsum = _mm512_maskz_loadu_epi32(mask, packed.colsums + 4 * n0);
    return {_mm512_maskz_loadu_ps(mask, packed.scales + 4 * n0), _mm512_maskz_slli_epi32(mask, colsum, 7)};
  }
  __attribute__((target("avx512f,avx512bw,avx512vl"))) __m512 operator()(const LinearLayer& layer, const Panel& p, int i, __m512i acc,
                                                                      __m512 bias) const {
    const __m512 c = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(acc, p.offset));
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(a[i]), p.s);
    return layer.bias != nullptr ? _mm512_fmadd_ps(c, scale, bias) : _mm512_mul_ps(c, scale);
  }
};

// --- the bf16 and int8 tiles: one template, as both take a step of 4
// bytes of each row (a bf16 pair; 4 int8 codes) broadcast against a panel's
// 64 bytes (16 pairs; 16 outputs' 4 codes). Dot says which instruction.
// Its target names both extensions, so that one template serves both; each
// instantiation uses only its own Dot's instruction (no compiler generates
// the other's from this code), and only where the CPU has it.

struct Bf16Dot {
  using Acc = __m512;
  const std::int8_t* weights;
  const std::int8_t* rows;
  std::int64_t row_bytes;
  Bf16Dot(const LinearLayer& layer, const Rows& r)
      : weights(static_cast<const std::int8_t*>(layer.packed)),
        rows(reinterpret_cast<const std::int8_t*>(r.narrow)),
        row_bytes(2 * r.ldn) {}
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static Acc zero() { return _mm512_setzero_ps(); }
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static Acc step(Acc acc, __m512i x, __m512i w) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(x), reinterpret_cast<__m512bh>(w));
  }
  AddBias finish(const Rows&, std::int64_t) const { return {}; }
};

struct Int8Dot {
  using Acc = __m512i;
  Int8Packed packed;
  const std::int8_t* weights;
  const std::int8_t* rows;
  std::int64_t row_bytes;
  Int8Dot(const LinearLayer& layer, const Rows& r)
      : packed(layer.packed, layer.inputs, layer.outputs), weights(packed.codes), rows(reinterpret_cast<const std::int8_t*>(r.codes)),
        row_bytes(r.ldn) {}
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static Acc zero() { return _mm512_setzero_si512(); }
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static Acc step(Acc acc, __m512i x, __m512i w) {
    return _mm512_dpbusd_epi32(acc, x, w);
  }
  Int8Finish finish(const Rows& r, std::int64_t m0) const { return {packed, r.scale + m0}; }
};

template <int MR, int NV, typename Dot>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni"))) void tile_words(const LinearLayer& layer, const Rows& r,
                                                                                         std::int64_t m0, std::int64_t p) {
  const Dot dot(layer, r);
  const std::int64_t steps = dot.row_bytes / 4, panel_bytes = steps * kPanel * 4;
  const std::int8_t* w = dot.weights + p * panel_bytes;
  typename Dot::Acc acc[MR][NV];
  // Every loop over the tile's rows and panels unrolled: the accumulators
  // then live in registers, never in memory.
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = Dot::zero();
  }
  const std::int8_t* x = dot.rows + m0 * dot.row_bytes;
  for (std::int64_t k = 0; k < steps; ++k) {
    __m512i wv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_si512(w + v * panel_bytes + k * kPanel * 4);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      std::int32_t word = 0;
      std::memcpy(&word, x + i * dot.row_bytes + 4 * k, sizeof word);
      const __m512i xi = _mm512_set1_epi32(word);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = Dot::step(acc[i][v], xi, wv[v]);
    }
  }
  store_avx512<MR, NV>(layer, r, m0, p, acc, dot.finish(r, m0));
}

template <typename Dot>
struct Words {
  template <int MR, int NV>
  struct Tile {
    static void run(const LinearLayer& layer, const Rows& r, std::int64_t m0, std::int64_t p) { tile_words<MR, NV, Dot>(layer, r, m0, p); }
  };
};

// A narrow int8 layer: each output an integer dot product of a row's codes
// and the output's, `depth` long (exact: any order).
using Int8Dots = std::int32_t (*)(const std::uint8_t* u, const std::int8_t* w, std::int64_t depth);

std::int32_t dot_int8_portable(const std::uint8_t* u, const std::int8_t* w, std::int64_t depth) {
  std::int32_t acc = 0;
  for (std::int64_t k = 0; k < depth; ++k) acc += u[k] * w[k];
  return acc;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) std::int32_t dot_int8_vnni(const std::uint8_t* u, const std::int8_t* w,
                                                                                         std::int64_t depth) {
  __m512i acc = _mm512_setzero_si512();
  for (std::int64_t k = 0; k < depth; k += 4 * kPanel) acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(u + k), _mm512_loadu_si512(w + k));
  alignas(64) std::int32_t lane[kPanel];
  _mm512_store_si512(lane, acc);
  std::int32_t sum = 0;
  for (const std::int32_t l : lane) sum += l;
  return sum;
}

template <Int8Dots dot>
void narrow_int8(const LinearLayer& layer, const Rows& r) {
  const Int8Packed packed(layer.packed, layer.inputs, layer.outputs);
  for (std::int64_t m = 0; m < r.rows; ++m) {
    for (std::int64_t n = 0; n < layer.outputs; ++n) {
      const std::int32_t acc = dot(r.codes + m * r.ldn, packed.codes + n * r.ldn, r.ldn);
      r.y[m * r.ldy + n] = int8_output(layer, packed, n, acc, r.scale[m]);
    }
  }
}

void layer_int8(Isa isa, const LinearLayer& layer, Rows r) {
  thread_local std::vector<std::uint8_t> codes;
  thread_local std::vector<float> scales;
  const bool fast = isa == Isa::kAvx512 && vnni_usable();
  r.ldn = int8_depth(layer.inputs, layer.outputs);
  codes.resize(static_cast<std::size_t>(r.rows * r.ldn));
  scales.resize(static_cast<std::size_t>(r.rows));
  for (std::int64_t m = 0; m < r.rows; ++m) {
    (fast ? quantize_avx512 : quantize_portable)(r.x + m * r.ldx, layer.inputs, r.ldn, codes.data() + m * r.ldn, scales.data() + m);
  }
  r.codes = codes.data();
  r.scale = scales.data();
  if (narrow(layer.outputs)) {
    fast ? narrow_int8<dot_int8_vnni>(layer, r) : narrow_int8<dot_int8_portable>(layer, r);
  } else if (fast) {
    layer_rows8<Words<Int8Dot>::Tile>(layer, r);
  } else {
    layer_int8_portable(layer, r);
  }
}

// --- narrow layers (narrow(): reduced along k, fold_lanes). Each path
// fills one output's 16 lanes from a row (x) and the output's packed row
// (w, `depth` long); narrow_rows runs it over the rows and outputs.

template <typename X>
using Lanes = void (*)(const X* x, std::int64_t inputs, const void* w, std::int64_t depth, float* lane);

template <typename X, Lanes<X> lanes>
void narrow_rows(const LinearLayer& layer, const X* x, std::int64_t ldx, const Rows& r) {
  const std::int64_t depth = narrow_depth(layer.inputs, std::is_same_v<X, float> ? LinearPrecision::kFp32 : LinearPrecision::kBf16);
  // A bf16 row is its inputs rounded up to pairs (its last pair's second a zero).
  const std::int64_t inputs = std::is_same_v<X, float> ? layer.inputs : 2 * pairs(layer.inputs);
  const std::int64_t element = std::is_same_v<X, float> ? 4 : 2;
  for (std::int64_t m = 0; m < r.rows; ++m) {
    for (std::int64_t n = 0; n < layer.outputs; ++n) {
      alignas(64) float lane[kPanel];
      lanes(x + m * ldx, inputs, static_cast<const char*>(layer.packed) + n * depth * element, depth, lane);
      r.y[m * r.ldy + n] = finish(layer, n, fold_lanes(lane));
    }
  }
}

void lanes_portable(const float* x, std::int64_t inputs, const void* packed, std::int64_t depth, float* lane) {
  const auto* w = static_cast<const float*>(packed);
  for (std::int64_t j = 0; j < kPanel; ++j) lane[j] = 0;
  for (std::int64_t k = 0; k < depth; ++k) lane[k % kPanel] = std::fma(k < inputs ? x[k] : 0.f, w[k], lane[k % kPanel]);
}

__attribute__((target("avx2,fma"))) void lanes_avx2(const float* x, std::int64_t inputs, const void* packed, std::int64_t depth,
                                                    float* lane) {
  const auto* w = static_cast<const float*>(packed);
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();  // lanes 0-7 and 8-15
  for (std::int64_t k = 0; k < depth; k += kPanel) {
    alignas(32) float part[kPanel] = {};
    const float* xk = x + k;
    if (k + kPanel > inputs) {
      std::memcpy(part, xk, sizeof(float) * static_cast<std::size_t>(inputs - k));
      xk = part;
    }
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(xk), _mm256_loadu_ps(w + k), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(xk + 8), _mm256_loadu_ps(w + k + 8), hi);
  }
  _mm256_storeu_ps(lane, lo);
  _mm256_storeu_ps(lane + 8, hi);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void lanes_avx512(const float* x, std::int64_t inputs, const void* packed,
                                                                     std::int64_t depth, float* lane) {
  const auto* w = static_cast<const float*>(packed);
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < depth; k += kPanel) {
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(columns_mask(inputs - k), x + k), _mm512_loadu_ps(w + k), acc);
  }
  _mm512_storeu_ps(lane, acc);
}

// bf16: lane l sums the pairs (32q + 2l, 32q + 2l + 1), each as vdpbf16ps does.
void lanes_bf16_portable(const std::uint16_t* x, std::int64_t inputs, const void* packed, std::int64_t depth, float* lane) {
  const auto* w = static_cast<const std::uint16_t*>(packed);
  auto at = [&](std::int64_t k) { return k < inputs ? from_bf16(x[k]) : 0.f; };
  for (std::int64_t j = 0; j < kPanel; ++j) lane[j] = 0;
  for (std::int64_t k = 0; k < depth; k += 2) {
    float& acc = lane[(k / 2) % kPanel];
    acc = std::fma(at(k + 1), from_bf16(w[k + 1]), acc);
    acc = std::fma(at(k), from_bf16(w[k]), acc);
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void lanes_bf16(const std::uint16_t* x, std::int64_t inputs,
                                                                              const void* packed, std::int64_t depth, float* lane) {
  const auto* w = static_cast<const std::uint16_t*>(packed);
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < depth; k += 2 * kPanel) {
    const std::int64_t left = inputs - k;
    const __mmask32 mask = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
    const auto xk = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, x + k));
    acc = _mm512_dpbf16_ps(acc, xk, reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + k)));
  }
  _mm512_storeu_ps(lane, acc);
}

void layer_bf16(Isa isa, const LinearLayer& layer, Rows r) {
  thread_local std::vector<std::uint16_t> rounded;
  r.ldn = 2 * pairs(layer.inputs);
  rounded.resize(static_cast<std::size_t>(r.rows * r.ldn));
  if (r.ldn == r.ldx) {  // rows back to back, as run_chain has them: one call
    to_bf16(isa, r.x, rounded.data(), static_cast<std::size_t>(r.rows * r.ldn));
  } else {
    for (std::int64_t m = 0; m < r.rows; ++m) {
      to_bf16(isa, r.x + m * r.ldx, rounded.data() + m * r.ldn, static_cast<std::size_t>(layer.inputs));
      if (layer.inputs % 2 != 0) rounded[static_cast<std::size_t>(m * r.ldn + layer.inputs)] = 0;  // the last pair's second
    }
  }
  r.narrow = rounded.data();
  const bool fast = linear_path(isa, LinearPrecision::kBf16) == "avx512_bf16";
  if (narrow(layer.outputs)) {
    fast ? narrow_rows<std::uint16_t, lanes_bf16>(layer, r.narrow, r.ldn, r)
         : narrow_rows<std::uint16_t, lanes_bf16_portable>(layer, r.narrow, r.ldn, r);
  } else if (fast) {
    layer_rows8<Words<Bf16Dot>::Tile>(layer, r);
  } else {
    layer_bf16_portable(layer, r);
  }
}

void run_layer(Isa isa, const LinearLayer& layer, const Rows& r) {
  if (layer.precision == LinearPrecision::kBf16) return layer_bf16(isa, layer, r);
  if (layer.precision == LinearPrecision::kInt8) return layer_int8(isa, layer, r);
  if (narrow(layer.outputs)) {
    switch (isa) {
      case Isa::kAvx512: return narrow_rows<float, lanes_avx512>(layer, r.x, r.ldx, r);
      case Isa::kAvx2: return narrow_rows<float, lanes_avx2>(layer, r.x, r.ldx, r);
      case Isa::kPortable: return narrow_rows<float, lanes_portable>(layer, r.x, r.ldx, r);
    }
  }
  switch (isa) {
    case Isa::kAvx512: return layer_rows8<Fp32Tile>(layer, r);
    case Isa::kAvx2: return layer_avx2(layer, r);
    case Isa::kPortable: break;
  }
  layer_portable(layer, r);
}

}  // namespace

std::string_view linear_path(Isa isa, LinearPrecision precision) {
  if (precision == LinearPrecision::kBf16) return isa == Isa::kAvx512 && cpu_has_avx512_bf16() ? "avx512_bf16" : "portable";
  if (precision == LinearPrecision::kInt8) return isa == Isa::kAvx512 && vnni_usable() ? "avx512_vnni" : "portable";
  return isa_name(isa);
}

std::size_t packed_elements(std::int64_t inputs, std::int64_t outputs, LinearPrecision precision) {
  if (precision == LinearPrecision::kInt8) {
    return static_cast<std::size_t>(int8_code_bytes(inputs, outputs) + 8 * outputs);
  }
  if (narrow(outputs)) return static_cast<std::size_t>(outputs * narrow_depth(inputs, precision));
  const std::int64_t depth = precision == LinearPrecision::kBf16 ? 2 * pairs(inputs) : inputs;
  return static_cast<std::size_t>(panels(outputs) * kPanel * depth);
}

void pack_fp32(const float* weight, std::int64_t inputs, std::int64_t outputs, float* out) {
  std::memset(out, 0, sizeof(float) * packed_elements(inputs, outputs, LinearPrecision::kFp32));
  if (narrow(outputs)) {
    const std::int64_t depth = narrow_depth(inputs, LinearPrecision::kFp32);
    for (std::int64_t n = 0; n < outputs; ++n) std::memcpy(out + n * depth, weight + n * inputs, sizeof(float) * static_cast<std::size_t>(inputs));
    return;
  }
  for (std::int64_t n = 0; n < outputs; ++n) {
    float* panel = out + (n / kPanel) * inputs * kPanel + n % kPanel;
    for (std::int64_t k = 0; k < inputs; ++k) panel[k * kPanel] = weight[n * inputs + k];
  }
}

void pack_bf16(const float* weight, std::int64_t inputs, std::int64_t outputs, std::uint16_t* out) {
  std::memset(out, 0, sizeof(std::uint16_t) * packed_elements(inputs, outputs, LinearPrecision::kBf16));
  if (narrow(outputs)) {
    const std::int64_t depth = narrow_depth(inputs, LinearPrecision::kBf16);
    for (std::int64_t n = 0; n < outputs; ++n) {
      for (std::int64_t k = 0; k < inputs; ++k) out[n * depth + k] = to_bf16(weight[n * inputs + k]);
    }
    return;
  }
  const std::int64_t k2 = pairs(inputs);
  for (std::int64_t n = 0; n < outputs; ++n) {
    std::uint16_t* panel = out + (n / kPanel) * k2 * kPanel * 2 + (n % kPanel) * 2;
    for (std::int64_t k = 0; k < inputs; ++k) panel[(k / 2) * kPanel * 2 + k % 2] = to_bf16(weight[n * inputs + k]);
  }
}

void pack_int8(const float* weight, std::int64_t inputs, std::int64_t outputs, std::int8_t* out) {
  std::memset(out, 0, packed_elements(inputs, outputs, LinearPrecision::kInt8));
  const std::int64_t depth = int8_depth(inputs, outputs), scales = int8_code_bytes(inputs, outputs), colsums = scales + 4 * outputs;
  for (std::int64_t n = 0; n < outputs; ++n) {
    const float* row = weight + n * inputs;
    float wmax = 0;
    bool finite = true;
    for (std::int64_t k = 0; k < inputs; ++k) {
      finite = finite && std::abs(row[k]) <= FLT_MAX;
      wmax = std::max(wmax, std::abs(row[k]));
    }
    const float s = finite ? wmax / 127.f : std::numeric_limits<float>::quiet_NaN();
    std::int32_t colsum = 0;
    for (std::int64_t k = 0; finite && s > 0 && k < inputs; ++k) {
      const std::int8_t code = static_cast<std::int8_t>(std::clamp(std::nearbyint(row[k] / s), -127.f, 127.f));
      out[int8_at(depth, outputs, n, k)] = code;
      colsum += code;
    }
    std::memcpy(out + scales + 4 * n, &s, sizeof s);
    std::memcpy(out + colsums + 4 * n, &colsum, sizeof colsum);
  }
}

void unpack_int8(const void* packed, std::int64_t inputs, std::int64_t outputs, float* weight) {
  const Int8Packed p(packed, inputs, outputs);
  const std::int64_t depth = int8_depth(inputs, outputs);
  for (std::int64_t n = 0; n < outputs; ++n) {
    const float s = p.scale(n);
    for (std::int64_t k = 0; k < inputs; ++k) weight[n * inputs + k] = static_cast<float>(p.codes[int8_at(depth, outputs, n, k)]) * s;
  }
}

Int8Support int8_support() {
  Int8Support out;
  if (const char* forced = std::getenv("NUMASERVE_CPU_INT8"); forced != nullptr && std::string_view(forced) == "off") {
    out.missing = "int8 turned off by NUMASERVE_CPU_INT8=off";
    return out;
  }
  if (cpu_has_avx512_vnni()) out.instructions = "avx512_vnni";
  if (out.instructions.empty()) {
    out.missing = "this CPU lacks AVX512_VNNI (vpdpbusd), which int8 linear layers need";
  } else if (best_isa() != Isa::kAvx512) {
    out.missing = "this CPU (or its OS) lacks AVX-512 F/BW/VL, which int8 linear layers need with AVX512_VNNI";
  }
  out.usable = out.missing.empty();
  return out;
}

void run_chain(Isa isa, const LinearChain& chain, const float* in, float* out, std::int64_t begin, std::int64_t end) {
  if (chain.layers.empty()) return;
  std::int64_t widest = 0;
  for (const auto& layer : chain.layers) widest = std::max(widest, layer.outputs);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<std::size_t>(2 * kBlock * widest));
  const std::int64_t first = chain.layers.front().inputs, last = chain.layers.back().outputs;
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const std::int64_t rows = std::min(kBlock, end - b);
    const float* x = in + b * first;
    std::int64_t ldx = first;
    for (std::size_t l = 0; l < chain.layers.size(); ++l) {
      const LinearLayer& layer = chain.layers[l];
      const bool final = l + 1 == chain.layers.size();
      float* y = final ? out + b * last : scratch.data() + static_cast<std::int64_t>(l % 2) * kBlock * widest;
      run_layer(isa, layer, Rows{x, ldx, rows, y, layer.outputs});
      x = y;
      ldx = layer.outputs;
    }
  }
}

}  // namespace numaserve::kernels
