#pragma once
// Request bodies for the benchmarks: one user, a context and N candidate
// items drawn from the demo feature store, with a fixed seed so every run
// (and every mode of one run) sends the same requests.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "features/extract.h"
#include "numaserve/common/result.h"

namespace numaserve::bench {

struct RequestSet {
  std::vector<features::Request> requests;
  std::vector<std::string> bodies;  // the same requests as /predict JSON
};

// `count` distinct requests of `items` items each, ids taken from the store file.
Result<RequestSet> make_requests(const std::filesystem::path& store_file, std::size_t count, std::size_t items,
                                 std::uint64_t seed);

}  // namespace numaserve::bench
