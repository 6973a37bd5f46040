#pragma once
// A rowwise-quantized table's row as the bag kernels (kernels.cpp) and the
// conversion (rowwise.cpp) read it; kernels.h has the layout. Internal to
// kernels/: inlined where a bag reads each row's scale and bias.

#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"

namespace numaserve::kernels::rowwise {

inline std::int64_t rowwise_code_bytes(std::int64_t dim, int bits) { return bits == 4 ? (dim + 1) / 2 : dim; }

// from_fp16, inline.
inline float widen_fp16(std::uint16_t x) {
  const std::uint32_t sign = (x & 0x8000u) << 16, exponent = (x >> 10) & 0x1Fu, mantissa = x & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, a product of normal floats (exact, and no denormal for DAZ to flush).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  const std::uint32_t u = sign | (exponent == 0x1F ? 0x7F800000u : (exponent + 112) << 23) | mantissa << 13;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A rowwise-quantized row: its codes, and the scale and bias of its tail.
template <int kBits>
struct RowwiseRow {
  const std::uint8_t* codes;
  float scale, bias;
  RowwiseRow(const std::uint8_t* row, std::int64_t dim) : codes(row) {
    const std::uint8_t* tail = row + rowwise_code_bytes(dim, kBits);
    scale = widen_fp16(static_cast<std::uint16_t>(tail[0] | tail[1] << 8));
    bias = widen_fp16(static_cast<std::uint16_t>(tail[2] | tail[3] << 8));
  }
  RowwiseRow(const Bag& bag, std::int64_t id) : RowwiseRow(bag.table_rowwise + id * rowwise_row_bytes(bag.dim, kBits), bag.dim) {}
  int code(std::int64_t d) const {
    if constexpr (kBits == 4) {
      return (codes[d / 2] >> (4 * (d % 2))) & 0xF;
    } else {
      return codes[d];
    }
  }
  // std::fma(code, scale, bias) without a call into libm where the path
  // has no fma instruction (the portable one): a code (8 bits) times a scale
  // (an fp16's 11) is exact in float, so only the add rounds, as in the fma.
  float at(std::int64_t d) const { return static_cast<float>(code(d)) * scale + bias; }
};

}  // namespace numaserve::kernels::rowwise
