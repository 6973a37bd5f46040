#pragma once
// `numaserve-bench forward`: a model's forward in process on pinned CPUs,
// the limit serving over HTTP is compared with; with --graph-optimizations
// both (or --bag-reuse-both, --linear both, --bf16-beside) two loads of the
// model side by side in alternating rounds, so that a noisy machine's drift
// falls on both.

#include <cstddef>
#include <string>

namespace numaserve::bench {

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
  bool bf16_beside = false;     // also the optimized forward in bf16 (LoadOptions::precision)
  std::string linear = "own";   // the optimized forward's linear layers: own, libtorch, or both side by side
  std::string precision = "fp32";  // the optimized forward's: fp32 or bf16
};

// Prints one JSON line; the exit status.
int run_forward(const ForwardOptions& o);

}  // namespace numaserve::bench
