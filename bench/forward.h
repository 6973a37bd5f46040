#pragma once
// `numaserve-bench forward`: a model's forward in process on pinned CPUs,
// the limit serving over HTTP is compared with; with --graph-optimizations
// both (or --bag-reuse-both, --linear both, --beside) two or more loads of
// the model side by side in alternating rounds, so that a noisy machine's
// drift falls on all of them.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "features/model_spec.h"

namespace numaserve::bench {

// A narrowed forward measured beside fp32 (--beside NAME): what its load
// asks (LoadOptions::precision and embedding_precision), and the key its
// results take (NAME, NAME_speedup, NAME_error).
struct Narrowing {
  std::string_view name, key;
  features::Precision precision;
  std::optional<features::TablePrecision> tables;  // unset: as precision, as serve has it
};
inline constexpr std::array kNarrowings = {
    Narrowing{"bf16", "bf16", features::Precision::kBf16, std::nullopt},  // linear layers and tables in bf16
    Narrowing{"int8", "int8", features::Precision::kInt8, std::nullopt},  // int8 linear layers (VNNI), rowwise int8 tables
    Narrowing{"int8-tables", "int8_tables", features::Precision::kFp32, features::TablePrecision::kInt8},
    Narrowing{"int4-tables", "int4_tables", features::Precision::kFp32, features::TablePrecision::kInt4},
};

struct ForwardOptions {
  std::string model_dir, store, cpus;
  std::size_t items = 200;
  unsigned threads = 1;
  double seconds = 10, warmup = 2;
  double rate = 0;  // calls/s, each due at its time (the thread sleeps between); 0: back to back
  bool with_extraction = false;
  std::string graph_optimizations = "on";  // on, off, or both side by side
  bool roofline = false;
  std::string kernels;  // empty: the CPU's best path
  // What a call's rows share: "request" (one request of `items` items: every
  // row has its user's bags) or "nothing" (`items` one-item requests of
  // different users joined).
  std::string rows_share = "request";
  std::size_t join = 1;  // requests of --items items joined into one call
  bool huge_pages = true;  // LoadOptions::huge_pages
  bool bag_reuse_both = false;  // also the optimized forward pooling every bag (model::set_bag_reuse)
  std::vector<std::string> beside;  // kNarrowings' names: each also run beside the fp32 optimized forward
  std::string linear = "own";   // the optimized forward's linear layers: own, libtorch, or both side by side
  std::string precision = "fp32";  // the optimized forward's linear layers: fp32, bf16 or int8
  std::string embedding_precision;  // its tables: fp32, bf16, int8 or int4; empty: as precision (as serve)
};

// Prints one JSON line; the exit status.
int run_forward(const ForwardOptions& o);

}  // namespace numaserve::bench
