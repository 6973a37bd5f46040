#include "graph/triangle.h"

#include <algorithm>

namespace numaserve::graph {
namespace {

// The (row, column) pairs of the lower triangle of an F x F matrix, row by
// row; with the diagonal or without.
std::vector<std::pair<std::int64_t, std::int64_t>> triangle(std::int64_t f, bool diagonal) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::int64_t i = 0; i < f; ++i) {
    for (std::int64_t j = 0; j < i + (diagonal ? 1 : 0); ++j) out.emplace_back(i, j);
  }
  return out;
}

std::string name_of(bool diagonal, std::int64_t f) {
  return std::string(diagonal ? "lower triangle with diagonal" : "strictly lower triangle") + " of " + std::to_string(f) + " vectors";
}

}  // namespace

std::optional<std::string> which_triangle(const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs) {
  for (bool diagonal : {false, true}) {
    std::int64_t f = 0;
    while (static_cast<std::int64_t>(triangle(f, diagonal).size()) < static_cast<std::int64_t>(pairs.size())) ++f;
    if (!pairs.empty() && triangle(f, diagonal) == pairs) return name_of(diagonal, f);
  }
  return std::nullopt;
}

std::optional<std::string> which_flat_triangle(const std::vector<std::int64_t>& flat) {
  for (bool diagonal : {false, true}) {
    for (std::int64_t f = 1; static_cast<std::int64_t>(triangle(f, diagonal).size()) <= static_cast<std::int64_t>(flat.size()); ++f) {
      std::vector<std::pair<std::int64_t, std::int64_t>> decoded;
      for (auto p : flat) decoded.emplace_back(p / f, p % f);
      if (std::all_of(flat.begin(), flat.end(), [f](std::int64_t p) { return p >= 0 && p < f * f; }) &&
          triangle(f, diagonal) == decoded) {
        return name_of(diagonal, f);
      }
    }
  }
  return std::nullopt;
}

}  // namespace numaserve::graph
