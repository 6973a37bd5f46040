#pragma once
// Which lower triangle of a pairwise product an interaction selects, for
// the dot_interaction rewrite (graph.cpp): the constants a graph holds,
// named or refused. Torch-free.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace numaserve::graph {

// ("strictly lower triangle of 10 vectors") when `pairs`, (row, column) in
// order, are an F x F matrix's lower triangle row by row, with its
// diagonal or without; else nullopt.
std::optional<std::string> which_triangle(const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs);

// The same for flat indices into the F x F matrix (pair = row * F + column).
std::optional<std::string> which_flat_triangle(const std::vector<std::int64_t>& flat);

}  // namespace numaserve::graph
