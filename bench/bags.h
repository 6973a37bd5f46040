#pragma once
// `numaserve-bench bags`: the fused embedding-bag kernel on a float table
// and on its bf16, rowwise int8 and rowwise int4 copies, side by side in
// alternating rounds, on every path this CPU runs: what narrower tables cost
// or gain in the bags alone, apart from the rest of the forward (bf16 tables
// where the forward's products cannot be bf16: a CPU without bf16
// instructions; int8 and int4 tables on any CPU). Random ids over a table of
// --table-mb, as ranker_a's bags read them: one id per bag (an item's) and
// --ids per bag (a history).

#include <cstddef>
#include <string>

namespace numaserve::bench {

struct BagsOptions {
  std::string cpus;
  double table_mb = 1024;  // the float table; the bf16 copy is half, int8 and int4 about 28% and 16% at dim 32
  std::size_t dim = 32, bags = 200, ids = 20;
  double seconds = 10;
};

// Prints one JSON line; the exit status.
int run_bags(const BagsOptions& o);

}  // namespace numaserve::bench
