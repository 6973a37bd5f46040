#pragma once
// The CPU kernels behind the fused ops of model/graph.cpp: the DLRM dot
// interaction and many embedding bags in one pass. Torch-free on purpose —
// plain pointers in, plain pointers out — so each instruction-set path is
// compiled in one small file and tested against the scalar reference in the
// fast unit binary.
//
// Every kernel has three paths, picked at run time: AVX-512 (F, BW, VL),
// AVX2 (avx2 + fma: the fleet's older machines have no AVX-512) and a
// portable one. All compute rows [begin, end) only, so callers split rows
// over threads.
//
// Numerics: bags add their rows in index order from zero, per lane, and a
// mean divides by the count, as ATen's CPU embedding_bag does: sums and
// means are bit-identical to it on every path. Weighted bags (and the dot
// products) use fused multiply-adds where the path has them, so they may
// differ from ATen in the last bits of each element.
//
// bf16 tables (a model served with `precision: bf16`): a bag reads each
// row's bf16 values widened to float (exact: a bf16 is a float's upper
// half) and adds as it does for float rows, so a bag of a bf16 table equals,
// bit for bit, the same bag of its float widening. Conversion to bf16
// rounds to nearest even on every path, bit for bit the scalar to_bf16:
// no path uses AVX512_BF16's own convert, which flushes denormals to zero.
//
// Rowwise-quantized tables (int8 / int4, below): a bag computes each row's
// values as dequantize_rows does, fma(code, scale, bias) (the product is
// exact, so a path without fma that multiplies and adds gets the same
// bits), then adds them as it adds a float table's: a bag of a quantized
// table equals, bit for bit, the same path's bag of its dequantize_rows. A
// row is about a quarter (int8) or an eighth (int4) of a float row's bytes,
// which is what a bag gathering rows from DRAM waits on.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace numaserve::kernels {

enum class Isa { kPortable, kAvx2, kAvx512 };

std::string_view isa_name(Isa isa);
// The widest path this CPU (and the OS's saved register state) supports.
Isa best_isa();
// Every path this CPU can run, portable first.
std::vector<Isa> supported_isas();

// bf16: a float's upper 16 bits. to_bf16 rounds to nearest even; a NaN
// stays a NaN (quieted, sign kept); infinities and signed zeros stay.
std::uint16_t to_bf16(float x);
float from_bf16(std::uint16_t x);
// to_bf16 of n floats, on `isa`'s path.
void to_bf16(Isa isa, const float* in, std::uint16_t* out, std::size_t n);

// Rowwise-quantized tables (a model's embedding_precision int8 / int4, FBGEMM's
// "fused rowwise" idea): each row is its codes, then its scale and its bias as
// fp16 (2 bytes each, little-endian, scale first). int8: one unsigned code per
// element (dim bytes); int4: two per byte, element 2i in the low nibble and
// 2i+1 in the high one ((dim + 1) / 2 bytes, an odd dim's last high nibble 0).
// An element's value is std::fma(float(code), scale, bias) with scale and bias
// widened from fp16 — on every path.
inline constexpr std::int64_t kRowwiseTail = 4;
// A row's bytes, bits 8 or 4 (inline: the bags compute it for every row).
inline std::int64_t rowwise_row_bytes(std::int64_t dim, int bits) { return (bits == 4 ? (dim + 1) / 2 : dim) + kRowwiseTail; }
std::uint16_t to_fp16(float x);     // round to nearest even; overflow -> inf; NaN stays NaN
float from_fp16(std::uint16_t x);   // exact, subnormals included
// Quantizes table [rows][dim] (row-major floats) into out (rows * rowwise_row_bytes).
// Per row: bias = fp16(min), scale = fp16((max - min) / (2^bits - 1)); each code
// round-to-nearest of (x - bias) / scale computed with the stored (fp16-widened)
// scale and bias, clamped to [0, 2^bits - 1]; scale 0 (a constant row) gives codes 0.
// The quotient is taken in double and rounded to nearest, ties to even (by
// arithmetic, not the FPU's mode or libm), so the codes are the same on every
// machine, and an element is off by at most half a step plus what rounding
// bias and scale to fp16 moved the row's ends (about 2^-11 of |min| and of
// max - min: small beside a step for embedding rows, |min| near their range).
// Returns false (and what it wrote is garbage) when a row holds a non-finite value or
// one beyond fp16's range (|value| > 65504, where its bias or scale need not be finite
// in fp16): the caller keeps the table in fp32. Also false for bits other than 8 and 4.
bool quantize_rows(const float* table, std::int64_t rows, std::int64_t dim, int bits, std::uint8_t* out);
// The values the kernels read: out [count][dim] floats, from `count` quantized rows.
void dequantize_rows(const std::uint8_t* rows, std::int64_t count, std::int64_t dim, int bits, float* out);

// Whether this CPU multiplies bf16 matrices in hardware, which a bf16 model
// needs to be worth serving: AVX512_BF16, or AMX-BF16 with its tile state
// granted by the kernel (arch_prctl ARCH_REQ_XCOMP_PERM, asked here), and
// AVX512BW/VL/DQ, without which LibTorch 1.13 does not hand a bf16 matmul
// to oneDNN. `instructions` names what it has ("amx_bf16 avx512_bf16");
// `missing` what it lacks, when it cannot. NUMASERVE_CPU_BF16=off answers
// no (a fleet that wants fp32 everywhere, and the tests of the fallback).
struct Bf16Support {
  bool usable = false;
  std::string instructions;
  std::string missing;
};
Bf16Support bf16_support();

// The dot products of selected pairs of each row's vectors:
//   out[n * pairs + p] = sum_d v[n][rows[p]][d] * v[n][cols[p]][d]
// for n in [begin, end), v row-major [N][vectors][dim]. rows and cols are
// in [0, vectors) (callers check).
struct DotPairs {
  const float* v = nullptr;
  std::int64_t vectors = 0, dim = 0;
  const std::int64_t* rows = nullptr;
  const std::int64_t* cols = nullptr;
  std::int64_t pairs = 0;
  float* out = nullptr;
};
void dot_pairs(Isa isa, const DotPairs& job, std::int64_t begin, std::int64_t end);

// One embedding bag: bag b sums (mode kSum, optionally weighted) or
// averages (kMean; an empty bag is zeros) the table rows
// indices[offsets[b] .. end of b), where a bag ends at the next offset and
// the last at `last_end`. Callers check that offsets start at 0, do not
// decrease and stay within the indices, and that every index is a row.
struct Bag {
  enum class Mode { kSum, kMean };
  const float* table = nullptr;  // [rows][dim], row-major
  const std::uint16_t* table_bf16 = nullptr;  // instead of table: bf16 rows
  const std::uint8_t* table_rowwise = nullptr;  // instead of table: rowwise-quantized rows (row_bits 8 or 4)
  int row_bits = 0;
  std::int64_t dim = 0;
  const std::int64_t* indices = nullptr;
  const std::int64_t* offsets = nullptr;
  std::int64_t bags = 0;      // offsets used as bag starts
  std::int64_t last_end = 0;  // where the last bag ends
  const float* weights = nullptr;  // per index, or null
  Mode mode = Mode::kSum;
  float* out = nullptr;  // [bags][dim]
};
// Bags [begin, end) of every table in `bags`, row by row: each row reads all
// its tables before the next row starts, so one pass over the rows serves
// them all. A table with fewer bags than `end` is done at its last. A bag
// with the same ids and weights as the bag before it in [begin, end) (the
// user's bags on every row of one request) is a copy of that bag's output:
// the same bits its own pooling would give; `reuse` false pools every bag
// (what the reuse saves, for the benchmark).
void embedding_bags(Isa isa, const Bag* bags, std::size_t count, std::int64_t begin, std::int64_t end,
                    bool reuse = true);

// The logistic function and tanh of n floats, each element by the same
// scalar function whatever its position (computed in double, rounded once):
// ATen's vectorized loops compute a tensor's last elements (its length
// modulo the vector width) with another function than the rest, so a row's
// score would depend on where its batch ends.
void sigmoid(const float* in, float* out, std::size_t n);
void tanh(const float* in, float* out, std::size_t n);

}  // namespace numaserve::kernels
