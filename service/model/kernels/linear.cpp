// Each path is compiled for its own instruction set (GCC's target
// attribute), as in kernels.cpp. A tile is up to 8 rows (6 on AVX2) by one
// or two 16-output panels, its accumulators in registers for the whole
// reduction: every output element is one chain of fused multiply-adds in
// the order of k, whatever the tile's shape, so the row count changes no bit.
#include "kernels/linear.h"
#include "kernels/linear_tiles.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

namespace numaserve::kernels {
namespace {

using namespace tiles;

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return best_isa() == Isa::kAvx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);  // CPUID.(7,1):EAX[5]
  }();
  return has;
}

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

template <int MR, int NV>
struct Fp32Tile {
  static void run(const LinearLayer& layer, const Rows& r, std::int64_t m0, std::int64_t p) { tile_avx512<MR, NV>(layer, r, m0, p); }
};

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

