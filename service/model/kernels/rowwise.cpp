// Rowwise-quantized tables (kernels.h): fp16 scales and biases, and the
// conversion of a float table at load.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/rowwise_row.h"

namespace numaserve::kernels {
namespace {

using namespace rowwise;

template <int kBits>
void dequantize(const std::uint8_t* rows, std::int64_t count, std::int64_t dim, float* out) {
  for (std::int64_t r = 0; r < count; ++r) {
    const RowwiseRow<kBits> row(rows + r * rowwise_row_bytes(dim, kBits), dim);
    for (std::int64_t d = 0; d < dim; ++d) out[r * dim + d] = row.at(d);
  }
}

}  // namespace

std::uint16_t to_fp16(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  // A NaN keeps its payload's upper bits, quiet; from 65520 (65504 and half an ulp, a tie to even) up, infinity.
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  // Normal halves (from 2^-14): round at bit 13, a carry moving up the exponent; then rebias 127 -> 15.
  if (a >= 0x38800000u) return static_cast<std::uint16_t>(sign | ((a + 0xFFFu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
  // Subnormal halves: the value in units of 2^-24, rounded; 2^-25 and below (exponent < 102) is zero or a tie to it.
  const std::uint32_t exponent = a >> 23;
  if (exponent < 102) return sign;
  const std::uint32_t mantissa = (a & 0x7FFFFFu) | 0x800000u, shift = 126 - exponent;
  const std::uint32_t kept = mantissa >> shift, rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
  return static_cast<std::uint16_t>(sign | (kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u)));
}

float from_fp16(std::uint16_t x) { return widen_fp16(x); }

bool quantize_rows(const float* table, std::int64_t rows, std::int64_t dim, int bits, std::uint8_t* out) {
  if (bits != 8 && bits != 4) return false;
  const std::int64_t code_bytes = rowwise_code_bytes(dim, bits), row_bytes = code_bytes + kRowwiseTail;
  const int top = (1 << bits) - 1;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(dim));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = table + r * dim;
    std::uint8_t* row = out + r * row_bytes;
    float lo = dim > 0 ? x[0] : 0.f, hi = lo;
    bool in_range = true;
    for (std::int64_t d = 0; d < dim; ++d) {
      lo = std::min(lo, x[d]);
      hi = std::max(hi, x[d]);
      in_range &= std::abs(x[d]) <= 65504.f;  // false for a NaN too
    }
    const std::uint16_t bias16 = to_fp16(lo), scale16 = to_fp16((hi - lo) / static_cast<float>(top));
    if (!in_range || (bias16 & 0x7C00u) == 0x7C00u || (scale16 & 0x7C00u) == 0x7C00u) return false;
    const double bias = from_fp16(bias16), scale = from_fp16(scale16);
    for (std::int64_t d = 0; d < dim; ++d) {
      // Clamped, then rounded to nearest, ties to even, by adding and taking away 2^52.
      const double v = scale == 0 ? 0 : std::clamp((x[d] - bias) / scale, 0.0, static_cast<double>(top));
      codes[static_cast<std::size_t>(d)] = static_cast<std::uint8_t>((v + 0x1p52) - 0x1p52);
    }
    if (bits == 8) {
      std::copy(codes.begin(), codes.end(), row);
    } else {
      for (std::int64_t k = 0; k < code_bytes; ++k) {
        const std::int64_t high = 2 * k + 1;
        row[k] = static_cast<std::uint8_t>(codes[static_cast<std::size_t>(2 * k)] | (high < dim ? codes[static_cast<std::size_t>(high)] << 4 : 0));
      }
    }
    const std::uint8_t tail[kRowwiseTail] = {static_cast<std::uint8_t>(scale16), static_cast<std::uint8_t>(scale16 >> 8),
                                             static_cast<std::uint8_t>(bias16), static_cast<std::uint8_t>(bias16 >> 8)};
    std::memcpy(row + code_bytes, tail, sizeof tail);
  }
  return true;
}

void dequantize_rows(const std::uint8_t* rows, std::int64_t count, std::int64_t dim, int bits, float* out) {
  (bits == 4 ? dequantize<4> : dequantize<8>)(rows, count, dim, out);
}

}  // namespace numaserve::kernels
