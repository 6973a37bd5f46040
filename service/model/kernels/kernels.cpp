// Each path is a function compiled for its own instruction set (GCC's
// target attribute), so the library builds for the baseline x86-64 and the
// wide paths run only where best_isa() found them.
#include "kernels/kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

// GCC 12's AVX-512 headers initialize their "undefined" vectors from
// themselves (`__m512 __Y = __Y;`) and warn about it wherever one inlines.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace numaserve::kernels {
namespace {

// Where the bag of row b ends: at the next bag's start, the last at last_end.
std::int64_t bag_end(const Bag& bag, std::int64_t b) { return b + 1 < bag.bags ? bag.offsets[b + 1] : bag.last_end; }

// How far ahead the bag loops prefetch table rows: far enough to hide a
// DRAM miss behind a few rows' adds, near enough to stay in L1.
constexpr std::int64_t kPrefetch = 4;

void prefetch_row(const Bag& bag, std::int64_t i, std::int64_t stop) {
  if (i < stop) {
    const char* row = reinterpret_cast<const char*>(bag.table + bag.indices[i] * bag.dim);
    for (std::int64_t byte = 0; byte < bag.dim * 4; byte += 64) __builtin_prefetch(row + byte);
  }
}

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

void bag_portable(const Bag& bag, std::int64_t b) {
  float* out = bag.out + b * bag.dim;
  for (std::int64_t d = 0; d < bag.dim; ++d) out[d] = 0;
  const std::int64_t start = bag.offsets[b], stop = bag_end(bag, b);
  for (std::int64_t i = start; i < stop; ++i) {
    prefetch_row(bag, i + kPrefetch, stop);
    const float* row = bag.table + bag.indices[i] * bag.dim;
    if (bag.weights != nullptr) {
      for (std::int64_t d = 0; d < bag.dim; ++d) out[d] += bag.weights[i] * row[d];
    } else {
      for (std::int64_t d = 0; d < bag.dim; ++d) out[d] += row[d];
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
      const float* row = bag.table + bag.indices[i] * dim + d0;
      if (bag.weights != nullptr) {
        const __m256 w = _mm256_set1_ps(bag.weights[i]);
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * j), acc[j]);
      } else {
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(row + 8 * j));
      }
    }
    for (std::int64_t j = 0; j < lanes; ++j) {
      _mm256_storeu_ps(out + d0 + 8 * j, mean ? _mm256_div_ps(acc[j], count) : acc[j]);
    }
  }
  for (std::int64_t d = body; d < dim; ++d) {
    float sum = 0;
    for (std::int64_t i = start; i < stop; ++i) {
      const float x = bag.table[bag.indices[i] * dim + d];
      sum = bag.weights != nullptr ? __builtin_fmaf(bag.weights[i], x, sum) : sum + x;
    }
    out[d] = mean ? sum / static_cast<float>(stop - start) : sum;
  }
}

// --- AVX-512: 16 lanes, the tail of a row under a mask.

__attribute__((target("avx512f"))) void dot_pairs_avx512(const DotPairs& job, std::int64_t begin, std::int64_t end) {
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

__attribute__((target("avx512f"))) void bag_avx512(const Bag& bag, std::int64_t b) {
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
      const float* row = bag.table + bag.indices[i] * dim + d0;
      if (bag.weights != nullptr) {
        const __m512 w = _mm512_set1_ps(bag.weights[i]);
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(mask[j], row + 16 * j), acc[j]);
      } else {
        for (std::int64_t j = 0; j < lanes; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_maskz_loadu_ps(mask[j], row + 16 * j));
      }
    }
    for (std::int64_t j = 0; j < lanes; ++j) {
      _mm512_mask_storeu_ps(out + d0 + 16 * j, mask[j], mean ? _mm512_div_ps(acc[j], count) : acc[j]);
    }
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

void prefetch_bag(const Bag& bag, std::int64_t b) {
  if (b >= bag.bags) return;
  const std::int64_t start = bag.offsets[b];
  const std::int64_t stop = std::min(bag_end(bag, b), start + kPrefetchIdsPerBag);
  for (std::int64_t i = start; i < stop; ++i) prefetch_row(bag, i, stop);
}

template <void (*one)(const Bag&, std::int64_t)>
void bags_rows(const Bag* bags, std::size_t count, std::int64_t begin, std::int64_t end, bool reuse) {
  for (std::int64_t b = begin; b < end; ++b) {
    for (std::size_t k = 0; k < count; ++k) {
      const Bag& bag = bags[k];
      if (b >= bag.bags) continue;
      if (b + kPrefetchBags < end) prefetch_bag(bag, b + kPrefetchBags);
      // Only within [begin, end): the bag before `begin` may be another thread's, not yet written.
      if (reuse && b > begin && repeats_previous(bag, b)) {
        std::memcpy(bag.out + b * bag.dim, bag.out + (b - 1) * bag.dim, sizeof(float) * bag.dim);
      } else {
        one(bag, b);
      }
    }
  }
}

}  // namespace

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
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kPortable;
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

void embedding_bags(Isa isa, const Bag* bags, std::size_t count, std::int64_t begin, std::int64_t end, bool reuse) {
  switch (isa) {
    case Isa::kAvx512: return bags_rows<bag_avx512>(bags, count, begin, end, reuse);
    case Isa::kAvx2: return bags_rows<bag_avx2>(bags, count, begin, end, reuse);
    case Isa::kPortable: break;
  }
  bags_rows<bag_portable>(bags, count, begin, end, reuse);
}

}  // namespace numaserve::kernels
