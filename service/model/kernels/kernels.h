#pragma once
// The CPU kernels behind the fused ops of model/graph.cpp: the DLRM dot
// interaction and many embedding bags in one pass. Torch-free on purpose —
// plain pointers in, plain pointers out — so each instruction-set path is
// compiled in one small file and tested against the scalar reference in the
// fast unit binary.
//
// Every kernel has three paths, picked at run time: AVX-512 (avx512f),
// AVX2 (avx2 + fma: the fleet's older machines have no AVX-512) and a
// portable one. All compute rows [begin, end) only, so callers split rows
// over threads.
//
// Numerics: bags add their rows in index order from zero, per lane, and a
// mean divides by the count, as ATen's CPU embedding_bag does: sums and
// means are bit-identical to it on every path. Weighted bags (and the dot
// products) use fused multiply-adds where the path has them, so they may
// differ from ATen in the last bits of each element.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace numaserve::kernels {

enum class Isa { kPortable, kAvx2, kAvx512 };

std::string_view isa_name(Isa isa);
// The widest path this CPU (and the OS's saved register state) supports.
Isa best_isa();
// Every path this CPU can run, portable first.
std::vector<Isa> supported_isas();

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

}  // namespace numaserve::kernels
