// The int8 linear layers (linear.h has the numerics): packing, each row's
// quantization, and the products on AVX512_VNNI or the portable reference.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/linear.h"
#include "kernels/linear_tiles.h"

namespace numaserve::kernels {
namespace {

using namespace tiles;

bool cpu_has_avx512_vnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((c >> 11) & 1);  // CPUID.(7,0):ECX[11]
}

// --- int8 (linear.h has the numerics). A packed layer's parts: the codes
// (int8_at: where W[n][k]'s code is), then s_n and colsum_n, read unaligned.

std::int64_t int8_depth(std::int64_t inputs, std::int64_t outputs) { return round_up(inputs, narrow(outputs) ? 4 * kPanel : 4); }

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

}  // namespace

namespace tiles {

bool vnni_usable() {
  static const bool usable = best_isa() == Isa::kAvx512 && cpu_has_avx512_vnni();
  return usable;
}

std::int64_t int8_code_bytes(std::int64_t inputs, std::int64_t outputs) {
  return int8_depth(inputs, outputs) * (narrow(outputs) ? outputs : panels(outputs) * kPanel);
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

}  // namespace tiles

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

}  // namespace numaserve::kernels
