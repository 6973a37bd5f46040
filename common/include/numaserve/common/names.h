#pragma once
// Enum <-> string, from one table per enum. The names are what users type
// (flags, YAML, a CRD's spec) and what we print (logs, metrics, --help), so
// printing and parsing read the same rows and cannot drift apart; a new
// enumerator is one row. Use a constexpr table beside the enum:
//
//   constexpr auto kLevelNames = make_names<LogLevel>({{LogLevel::kDebug, "debug"}, ...});
//   kLevelNames.name(LogLevel::kDebug) == "debug";
//   kLevelNames.parse("debug") == LogLevel::kDebug;

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace numaserve {

template <class E, std::size_t N>
struct Names {
  std::array<std::pair<E, std::string_view>, N> table;

  // "" for a value without a row (a cast integer, say): callers choose
  // their own fallback rather than this header inventing one.
  constexpr std::string_view name(E value) const {
    for (const auto& [e, text] : table) {
      if (e == value) return text;
    }
    return {};
  }

  // Exact, case-sensitive: names are identifiers, not prose.
  constexpr std::optional<E> parse(std::string_view text) const {
    for (const auto& [e, name] : table) {
      if (name == text) return e;
    }
    return std::nullopt;
  }

  // The names in table order for an error message: "a, b or c".
  std::string choices() const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += table[i].second;
    }
    return out;
  }
};

// Deduces N from the braced rows, so a table is written once, without a count.
template <class E, std::size_t N>
constexpr Names<E, N> make_names(const std::pair<E, std::string_view> (&rows)[N]) {
  Names<E, N> out{};
  for (std::size_t i = 0; i < N; ++i) out.table[i] = rows[i];
  return out;
}

}  // namespace numaserve
