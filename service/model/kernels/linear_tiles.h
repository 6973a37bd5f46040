#pragma once
// What the linear kernels' files share (linear.cpp: fp32 and bf16, the
// chain; linear_int8.cpp: int8): a layer's rows, the AVX-512 tiles' shape
// and epilogue, and the narrow layers' lanes. Internal to kernels/.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/linear.h"

// GCC 12's AVX-512 headers initialize their "undefined" vectors from
// themselves and warn about it wherever one inlines (as in kernels.cpp;
// the int8 code avoids the ones that warn outright: _mm512_slli_epi32 and
// _mm512_cvtepi32_ps, zero-masked instead, and _mm512_reduce_add_epi32).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace numaserve::kernels::tiles {

// Rows run through the whole chain together: their intermediate outputs
// stay in the core's cache between layers.
inline constexpr std::int64_t kBlock = 32;

inline std::int64_t panels(std::int64_t outputs) { return (outputs + kPanel - 1) / kPanel; }
inline std::int64_t pairs(std::int64_t inputs) { return (inputs + 1) / 2; }
inline std::int64_t round_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

// max(0, y) as vmaxps(0, y) computes it: a NaN stays a NaN, -0 stays -0.
inline float relu(float y) { return 0.f > y ? 0.f : y; }

// A narrow layer (a score's last layer: 1 output) would use one lane of 16
// in a panel: its rows are reduced along k instead, 16 lanes each summing
// every 16th product (fp32) or pair of products (bf16) in the order of k,
// then the lanes added in a fixed tree (fold_lanes). Packed row by row, each
// row's inputs padded with zeros to a whole vector: 16 floats or 32 bf16.
inline bool narrow(std::int64_t outputs) { return outputs <= kNarrowOutputs; }
inline std::int64_t narrow_depth(std::int64_t inputs, LinearPrecision precision) {
  return round_up(inputs, precision == LinearPrecision::kBf16 ? 2 * kPanel : kPanel);
}

// The lanes' tree, the same on every path: lane i + lane i+8, then i + i+4,
// i + i+2, and the last two.
inline float fold_lanes(const float* lane) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = lane[i] + lane[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

inline float finish(const LinearLayer& layer, std::int64_t n, float acc) {
  const float y = layer.bias != nullptr ? acc + layer.bias[n] : acc;
  return layer.relu ? relu(y) : y;
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

// Two panels a tile while two are left, then the last one alone.
template <int MR, template <int, int> class Tile>
void rows_of_panels(const LinearLayer& layer, const Rows& r, std::int64_t m0) {
  const std::int64_t count = panels(layer.outputs);
  std::int64_t p = 0;
  for (; p + 2 <= count; p += 2) Tile<MR, 2>::run(layer, r, m0, p);
  if (p < count) Tile<MR, 1>::run(layer, r, m0, p);
}

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

// --- the bf16 and int8 tiles: one template, as both take a step of 4
// bytes of each row (a bf16 pair; 4 int8 codes) broadcast against a panel's
// 64 bytes (16 pairs; 16 outputs' 4 codes). Dot says which instruction.
// Its target names both extensions, so that one template serves both; each
// instantiation uses only its own Dot's instruction (no compiler generates
// the other's from this code), and only where the CPU has it.

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

// --- int8 (linear_int8.cpp).

// Whether the int8 tiles run here: AVX-512 and AVX512_VNNI.
bool vnni_usable();
// The bytes of a packed int8 layer's codes (its scales and sums follow).
std::int64_t int8_code_bytes(std::int64_t inputs, std::int64_t outputs);
// One int8 layer's rows, quantized here.
void layer_int8(Isa isa, const LinearLayer& layer, Rows r);

}  // namespace numaserve::kernels::tiles
