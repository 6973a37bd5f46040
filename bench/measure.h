#pragma once
// What every numaserve-bench subcommand measures with: a thread pinned as a
// service worker is, the one JSON line each prints, and the machine's
// limits a model's roofline is drawn from (sgemm GFLOP/s, random-gather
// bandwidth).

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace numaserve::bench {

// "numaserve-bench: MESSAGE" on stderr; 1.
int fail(const std::string& message);
// Runs `body` on a thread set up as a service worker is — pinned to `cpus`
// (list form; empty: not pinned) before anything else — and returns what it
// measured, or {"error": ...}.
nlohmann::json on_pinned_thread(const std::string& cpus, const std::function<nlohmann::json()>& body);
// Prints `out` as one line (0), or its error (1).
int print(const nlohmann::json& out);

// GFLOP/s of n x n sgemm calls for `seconds` on the calling thread, through
// the BLAS LibTorch calls; 0 without one.
double sgemm_gflops(int n, double seconds, std::size_t* calls_out = nullptr);
// Bytes/s of summing 128-byte rows read at random from 512 MiB, as
// embedding bags read their tables: the memory side of the roofline.
double gather_bytes_per_s(double seconds);

}  // namespace numaserve::bench
