// Each path is a function compiled for its own instruction set (GCC's
// target attribute), so the library builds for the baseline x86-64 and the
// wide paths run only where best_isa() found them.
#include "kernels/kernels.h"
#include "kernels/rowwise_row.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>

// GCC 12's AVX-512 headers initialize their "undefined" vectors from
// themselves (`__m512 __Y = __Y;`) and warn about it wherever one inlines.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace numaserve::kernels {
namespace {

using namespace rowwise;

// Where the bag of row b ends: at the next bag's start, the last at last_end.
std::int64_t bag_end(const Bag& bag, std::int64_t b) { return b + 1 < bag.bags ? bag.offsets[b + 1] : bag.last_end; }

// How far ahead the bag loops prefetch table rows: far enough to hide a
// DRAM miss behind a few rows' adds, near enough to stay in L1.
constexpr std::int64_t kPrefetch = 4;

// The prefetch helpers are always inlined: GCC's ipa-pure-const takes
// __builtin_prefetch for a const builtin, so a function that only
// prefetches is found const, and its calls (a const void) are deleted.
[[gnu::always_inline]] inline void prefetch_row(const Bag& bag, std::int64_t i, std::int64_t stop) {
  if (i < stop) {
    const char* table = bag.table_rowwise != nullptr ? reinterpret_cast<const char*>(bag.table_rowwise)
                        : bag.table_bf16 != nullptr  ? reinterpret_cast<const char*>(bag.table_bf16)
                                                     : reinterpret_cast<const char*>(bag.table);
    const std::int64_t bytes = bag.table_rowwise != nullptr ? rowwise_row_bytes(bag.dim, bag.row_bits)
                                                            : bag.dim * (bag.table_bf16 != nullptr ? 2 : 4);
    // Every line the row touches: a quantized row (codes and 4 bytes) seldom starts one.
    const auto first = reinterpret_cast<std::uintptr_t>(table + bag.indices[i] * bytes);
    for (std::uintptr_t line = first & ~std::uintptr_t{63}; line < first + static_cast<std::uintptr_t>(bytes); line += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(line));
    }
  }
}

// The bag kernels are written once for every row type: a Row is one table
// row, read as floats — at(d) its element d, and load8 / load16 (each
// path's, below) 8 or 16 elements from d.
struct FloatRow {
  const float* p;
  FloatRow(const Bag& bag, std::int64_t id) : p(bag.table + id * bag.dim) {}
  float at(std::int64_t d) const { return p[d]; }
};
// A bf16 row, widened exactly as read.
struct Bf16Row {
  const std::uint16_t* p;
  Bf16Row(const Bag& bag, std::int64_t id) : p(bag.table_bf16 + id * bag.dim) {}
  float at(std::int64_t d) const { return from_bf16(p[d]); }
};

void dot_pairs_portable(const DotPairs& job, std::int64_t begin, std::int64_t end) {
  for (std::int64_t n = begin; n < end; ++n) {
    const float* base = job.v + n * job.vectors * job.dim;
    for (std::int64_t p = 0; p < job.pairs; ++p) {
      const float* a = base + job.rows[p] * job.dim;
      const float* b = base + job.cols[p] * job.dim;
      float sum = 0;
      for (std::int64_t d = 0; d < job.dim; ++d) sum += a[d] * b[d];
      job.out[n * job.pairs + p] = sum;
    }
  }
}

template <typename Row>
void bag_portable(const Bag& bag, std::int64_t b) {
  float* out = bag.out + b * bag.dim;
  for (std::int64_t d = 0; d < bag.dim; ++d) out[d] = 0;
  const std::int64_t start = bag.offsets[b], stop = bag_end(bag, b);
  for (std::int64_t i = start; i < stop; ++i) {
    prefetch_row(bag, i + kPrefetch, stop);
    const Row row(bag, bag.indices[i]);
    if (bag.weights != nullptr) {
      for (std::int64_t d = 0; d < bag.dim; ++d) out[d] += bag.weights[i] * row.at(d);
    } else {
      for (std::int64_t d = 0; d < bag.dim; ++d) out[d] += row.at(d);
    }
  }
  if (bag.mode == Bag::Mode::kMean && stop > start) {
    const auto n = static_cast<float>(stop - start);
    for (std::int64_t d = 0; d < bag.dim; ++d) out[d] /= n;
  }
}

// --- AVX2 + FMA: 8 lanes, the tail of a row lane by lane.

__attribute__((target("avx2,fma"))) float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) void dot_pairs_avx2(const DotPairs& job, std::int64_t begin, std::int64_t end) {
  const std::int64_t dim = job.dim, body = dim - dim % 8;
  for (std::int64_t n = begin; n < end; ++n) {
    const float* base = job.v + n * job.vectors * dim;
    for (std::int64_t p = 0; p < job.pairs; ++p) {
      const float* a = base + job.rows[p] * dim;
      const float* b = base + job.cols[p] * dim;
      __m256 acc = _mm256_setzero_ps();
      for (std::int64_t d = 0; d < body; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
      float sum = hsum256(acc);
      for (std::int64_t d = body; d < dim; ++d) sum += a[d] * b[d];
      job.out[n * job.pairs + p] = sum;
    }
  }
}

__attribute__((target("avx2,fma"))) inline __m256 load8(const FloatRow& row, std::int64_t d) { return _mm256_loadu_ps(row.p + d); }
__attribute__((target("avx2,fma"))) inline __m256 load8(const Bf16Row& row, std::int64_t d) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.p + d))), 16));
}
// A quantized row's 8 codes in 32-bit lanes; int4: its 4 bytes each twice
// (b0 b0 b1 b1 ...), then the even lanes keep the low nibble, the odd the high.
__attribute__((target("avx2,fma"))) inline __m256i codes8(const RowwiseRow<8>& row, std::int64_t d) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row.codes + d)));
}
__attribute__((target("avx2,fma"))) inline __m256i codes8(const RowwiseRow<4>& row, std::int64_t d) {
  std::int32_t four = 0;
  std::memcpy(&four, row.codes + d / 2, sizeof four);
  const __m128i bytes = _mm_cvtsi32_si128(four);
  const __m256i lanes = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
  return _mm256_and_si256(_mm256_srlv_epi32(lanes, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi32(0xF));
}
template <int kBits>
__attribute__((target("avx2,fma"))) inline __m256 load8(const RowwiseRow<kBits>& row, std::int64_t d) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(codes8(row, d)), _mm256_set1_ps(row.scale), _mm256_set1_ps(row.bias));
}

template <typename Row>
__attribute__((target("avx2,fma"))) void bag_avx2(const Bag& bag, std::int64_t b) {
  const std::int64_t dim = bag.dim, body = dim - dim % 8;
  const std::int64_t start = bag.offsets[b], stop = bag_end(bag, b);
  float* out = bag.out + b * dim;
  const __m256 count = _mm256_set1_ps(static_cast<float>(stop - start));
  const bool mean = bag.mode == Bag::Mode::kMean && stop > start;
  // Four vectors (32 floats) at a time keep four adds in flight.
  for (std::int64_t d0 = 0; d0 < body; d0 += 32) {
    const std::int64_t lanes = std::min<std::int64_t>(4, (body - d0) / 8);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (std::int64_t i = start; i < stop; ++i) {
      if (d0 == 0) prefetch_row(bag, i + kPrefetch, stop);
      const Row row(bag, bag.indices[i]);
      if (bag.weights != nullptr) {
        const __m256 w = _mm256_set1_ps(bag.weights[i]);
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm256_fmadd_ps(w, load8(row, d0 + 8 * j), acc[j]);
      } else {
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm256_add_ps(acc[j], load8(row, d0 + 8 * j));
      }
    }
    for (std::int64_t j = 0; j < lanes; ++j) {
      _mm256_storeu_ps(out + d0 + 8 * j, mean ? _mm256_div_ps(acc[j], count) : acc[j]);
    }
  }
  for (std::int64_t d = body; d < dim; ++d) {
    float sum = 0;
    for (std::int64_t i = start; i < stop; ++i) {
      const float x = Row(bag, bag.indices[i]).at(d);
      sum = bag.weights != nullptr ? __builtin_fmaf(bag.weights[i], x, sum) : sum + x;
    }
    out[d] = mean ? sum / static_cast<float>(stop - start) : sum;
  }
}

// --- AVX-512: 16 lanes, the tail of a row under a mask.

__attribute__((target("avx512f,avx512bw,avx512vl"))) void dot_pairs_avx512(const DotPairs& job, std::int64_t begin, std::int64_t end) {
  const std::int64_t dim = job.dim;
  const auto tail = static_cast<__mmask16>((1u << (dim % 16)) - 1);
  for (std::int64_t n = begin; n < end; ++n) {
    const float* base = job.v + n * job.vectors * dim;
    for (std::int64_t p = 0; p < job.pairs; ++p) {
      const float* a = base + job.rows[p] * dim;
      const float* b = base + job.cols[p] * dim;
      __m512 acc = _mm512_setzero_ps();
      std::int64_t d = 0;
      for (; d + 16 <= dim; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), _mm512_loadu_ps(b + d), acc);
      if (d < dim) acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + d), _mm512_maskz_loadu_ps(tail, b + d), acc);
      job.out[n * job.pairs + p] = _mm512_reduce_add_ps(acc);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 load16(__mmask16 mask, const FloatRow& row, std::int64_t d) {
  return _mm512_maskz_loadu_ps(mask, row.p + d);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 load16(__mmask16 mask, const Bf16Row& row, std::int64_t d) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, row.p + d)), 16));
}
// As codes8, 16 lanes; the mask (lanes 0 .. n-1) reads only the bytes holding them.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i codes16(__mmask16 mask, const RowwiseRow<8>& row, std::int64_t d) {
  return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, row.codes + d));
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i codes16(__mmask16 mask, const RowwiseRow<4>& row, std::int64_t d) {
  const unsigned n = static_cast<unsigned>(__builtin_ctz(mask + 1u));
  const __m128i bytes = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << ((n + 1) / 2)) - 1), row.codes + d / 2);
  const __m512i lanes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
  const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  return _mm512_and_si512(_mm512_srlv_epi32(lanes, shift), _mm512_set1_epi32(0xF));
}
template <int kBits>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 load16(__mmask16 mask, const RowwiseRow<kBits>& row, std::int64_t d) {
  return _mm512_maskz_fmadd_ps(mask, _mm512_cvtepi32_ps(codes16(mask, row, d)), _mm512_set1_ps(row.scale), _mm512_set1_ps(row.bias));
}

template <typename Row>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void bag_avx512(const Bag& bag, std::int64_t b) {
  const std::int64_t dim = bag.dim;
  const std::int64_t start = bag.offsets[b], stop = bag_end(bag, b);
  float* out = bag.out + b * dim;
  const __m512 count = _mm512_set1_ps(static_cast<float>(stop - start));
  const bool mean = bag.mode == Bag::Mode::kMean && stop > start;
  // Four vectors (64 floats) at a time; the last vector of a row masked.
  for (std::int64_t d0 = 0; d0 < dim; d0 += 64) {
    const std::int64_t width = std::min<std::int64_t>(64, dim - d0);
    const std::int64_t lanes = (width + 15) / 16;
    __mmask16 mask[4];
    for (std::int64_t j = 0; j < 4; ++j) {
      const std::int64_t left = width - 16 * j;
      mask[j] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : left > 0 ? static_cast<__mmask16>((1u << left) - 1) : 0;
    }
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (std::int64_t i = start; i < stop; ++i) {
      if (d0 == 0) prefetch_row(bag, i + kPrefetch, stop);
      const Row row(bag, bag.indices[i]);
      if (bag.weights != nullptr) {
        const __m512 w = _mm512_set1_ps(bag.weights[i]);
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm512_fmadd_ps(w, load16(mask[j], row, d0 + 16 * j), acc[j]);
      } else {
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm512_add_ps(acc[j], load16(mask[j], row, d0 + 16 * j));
      }
    }
    for (std::int64_t j = 0; j < lanes; ++j) {
      _mm512_mask_storeu_ps(out + d0 + 16 * j, mask[j], mean ? _mm512_div_ps(acc[j], count) : acc[j]);
    }
  }
}

// --- float to bf16, rounding to nearest even as to_bf16 does: add
// 0x7FFF plus the kept part's lowest bit, keep the upper half; a NaN is
// its upper half with the quiet bit set.

__attribute__((target("avx2,fma"))) void to_bf16_avx2(const float* in, std::uint16_t* out, std::size_t n) {
  const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), quiet_bit = _mm256_set1_epi32(0x40);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    const __m256i u = _mm256_castps_si256(x), upper = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(upper, one))), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(upper, quiet_bit), nan);
    // Each 128-bit lane packs its four words twice; the low halves of the two lanes are the eight.
    const __m256i packed = _mm256_packus_epi32(r, r);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_unpacklo_epi64(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1)));
  }
  for (; i < n; ++i) out[i] = to_bf16(in[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void to_bf16_avx512(const float* in, std::uint16_t* out, std::size_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), quiet_bit = _mm512_set1_epi32(0x40);
  // The last vector under a mask: a linear layer's rows are converted one
  // at a time, and their lengths (77 inputs) are rarely whole vectors.
  for (std::size_t i = 0; i < n; i += 16) {
    const auto mask = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(mask, in + i);
    const __m512i u = _mm512_castps_si512(x), upper = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(upper, one))), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_or_si512(upper, quiet_bit));
    _mm256_mask_storeu_epi16(out + i, mask, _mm512_cvtepi32_epi16(r));
  }
}

// Bag b holds the same ids (and weights, bit for bit) as bag b - 1: its
// pooled vector is the same, bit for bit, as the adds run in the same order.
// The rows of one request share their user's and context's bags, so most
// rows of a batch repeat the row before for those features; comparing the
// ids costs a fraction of gathering their table rows.
bool repeats_previous(const Bag& bag, std::int64_t b) {
  const std::int64_t start = bag.offsets[b], previous = bag.offsets[b - 1];
  const std::int64_t length = bag_end(bag, b) - start;
  if (start - previous != length) return false;
  // The first id decides most comparisons (an item's bag) without a call.
  if (length > 0 && bag.indices[previous] != bag.indices[start]) return false;
  if (std::memcmp(bag.indices + previous, bag.indices + start, sizeof(std::int64_t) * length) != 0) return false;
  return bag.weights == nullptr || std::memcmp(bag.weights + previous, bag.weights + start, sizeof(float) * length) == 0;
}

// Rows ahead whose table rows are prefetched: a bag of one id (an item's)
// has nothing ahead of it within the bag, so the misses of the next rows'
// bags are started while this row's are added.
constexpr std::int64_t kPrefetchBags = 4;
constexpr std::int64_t kPrefetchIdsPerBag = 8;

[[gnu::always_inline]] inline void prefetch_bag(const Bag& bag, std::int64_t b) {
  if (b >= bag.bags) return;
  const std::int64_t start = bag.offsets[b];
  const std::int64_t stop = std::min(bag_end(bag, b), start + kPrefetchIdsPerBag);
  for (std::int64_t i = start; i < stop; ++i) prefetch_row(bag, i, stop);
}

// Bag b of a table of Row rows, on path kIsa.
template <Isa kIsa, typename Row>
void pool(const Bag& bag, std::int64_t b) {
  if constexpr (kIsa == Isa::kAvx512) {
    bag_avx512<Row>(bag, b);
  } else if constexpr (kIsa == Isa::kAvx2) {
    bag_avx2<Row>(bag, b);
  } else {
    bag_portable<Row>(bag, b);
  }
}

template <Isa kIsa>
void bags_rows(const Bag* bags, std::size_t count, std::int64_t begin, std::int64_t end, bool reuse) {
  for (std::int64_t b = begin; b < end; ++b) {
    for (std::size_t k = 0; k < count; ++k) {
      const Bag& bag = bags[k];
      if (b >= bag.bags) continue;
      if (b + kPrefetchBags < end) prefetch_bag(bag, b + kPrefetchBags);
      // Only within [begin, end): the bag before `begin` may be another thread's, not yet written.
      if (reuse && b > begin && repeats_previous(bag, b)) {
        std::memcpy(bag.out + b * bag.dim, bag.out + (b - 1) * bag.dim, sizeof(float) * bag.dim);
      } else if (bag.table_rowwise != nullptr) {
        (bag.row_bits == 4 ? pool<kIsa, RowwiseRow<4>> : pool<kIsa, RowwiseRow<8>>)(bag, b);
      } else if (bag.table_bf16 != nullptr) {
        pool<kIsa, Bf16Row>(bag, b);
      } else {
        pool<kIsa, FloatRow>(bag, b);
      }
    }
  }
}

}  // namespace

std::uint16_t to_bf16(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float from_bf16(std::uint16_t x) {
  const std::uint32_t u = static_cast<std::uint32_t>(x) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

void to_bf16(Isa isa, const float* in, std::uint16_t* out, std::size_t n) {
  switch (isa) {
    case Isa::kAvx512: return to_bf16_avx512(in, out, n);
    case Isa::kAvx2: return to_bf16_avx2(in, out, n);
    case Isa::kPortable: break;
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kPortable: break;
  }
  return "portable";
}

Isa best_isa() {
  // libgcc's answer also checks that the OS saves the wide registers (XCR0).
  __builtin_cpu_init();
  // AVX-512 means F, BW and VL here (every AVX-512 CPU since Skylake-SP):
  // a bf16 row's tail is a masked 16-bit load.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kPortable;
}

Bf16Support bf16_support() {
  Bf16Support out;
  if (const char* forced = std::getenv("NUMASERVE_CPU_BF16"); forced != nullptr && std::string_view(forced) == "off") {
    out.missing = "bf16 turned off by NUMASERVE_CPU_BF16=off";
    return out;
  }
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool avx512_bf16 = false, amx_bf16 = false;
  if (best_isa() == Isa::kAvx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512_bf16 = (a >> 5) & 1;  // CPUID.(7,1):EAX[5]
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) amx_bf16 = ((d >> 22) & 1) && ((d >> 24) & 1);            // EDX[22] AMX-BF16, [24] AMX-TILE
  std::string amx_refused;
  if (amx_bf16) {
    // Linux hands out the AMX tile state (XTILEDATA, 18) only to a process that asks.
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      amx_refused = std::string("; the kernel refused AMX's tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
                    std::strerror(errno) + ")";
      amx_bf16 = false;
    }
  }
  const bool wide = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512dq");
  if (amx_bf16) out.instructions = "amx_bf16";
  if (avx512_bf16) out.instructions += std::string(out.instructions.empty() ? "" : " ") + "avx512_bf16";
  if (out.instructions.empty()) {
    out.missing = "this CPU has neither AVX512_BF16 nor AMX-BF16" + amx_refused;
  } else if (!wide) {
    out.missing = "this CPU lacks AVX512BW/VL/DQ, which LibTorch's bf16 matrix products need";
  }
  out.usable = out.missing.empty();
  return out;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out = {Isa::kPortable};
  const Isa best = best_isa();
  if (best != Isa::kPortable) out.push_back(Isa::kAvx2);
  if (best == Isa::kAvx512) out.push_back(Isa::kAvx512);
  return out;
}

void dot_pairs(Isa isa, const DotPairs& job, std::int64_t begin, std::int64_t end) {
  switch (isa) {
    case Isa::kAvx512: return dot_pairs_avx512(job, begin, end);
    case Isa::kAvx2: return dot_pairs_avx2(job, begin, end);
    case Isa::kPortable: break;
  }
  dot_pairs_portable(job, begin, end);
}

void sigmoid(const float* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(in[i]))));
}

void tanh(const float* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::tanh(static_cast<double>(in[i])));
}

void embedding_bags(Isa isa, const Bag* bags, std::size_t count, std::int64_t begin, std::int64_t end, bool reuse) {
  switch (isa) {
    case Isa::kAvx512: return bags_rows<Isa::kAvx512>(bags, count, begin, end, reuse);
    case Isa::kAvx2: return bags_rows<Isa::kAvx2>(bags, count, begin, end, reuse);
    case Isa::kPortable: break;
  }
  bags_rows<Isa::kPortable>(bags, count, begin, end, reuse);
}

}  // namespace numaserve::kernels
