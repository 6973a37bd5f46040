#include "numaserve/common/quantity.h"

#include <array>
#include <charconv>
#include <limits>
#include <numeric>

namespace numaserve {
namespace {

struct Suffix {
  std::string_view name;
  std::uint64_t factor;
};

constexpr std::uint64_t kKi = 1024;
constexpr std::size_t kBinarySuffixes = 5;  // the first five entries below
constexpr std::array<Suffix, 10> kSuffixes = {{
    {"Ki", kKi}, {"Mi", kKi * kKi}, {"Gi", kKi * kKi * kKi}, {"Ti", kKi * kKi * kKi * kKi},
    {"Pi", kKi * kKi * kKi * kKi * kKi}, {"k", 1000}, {"M", 1000'000}, {"G", 1000'000'000},
    {"T", 1000'000'000'000}, {"P", 1000'000'000'000'000},
}};

}  // namespace

Result<std::uint64_t> parse_quantity(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  auto bad = [&](const std::string& why) {
    return make_error(Error::Code::kInvalidArgument, "bad quantity " + quoted + ": " + why,
                      std::string(text));
  };
  std::uint64_t factor = 1;
  std::string_view number = text;
  for (const auto& s : kSuffixes) {
    if (text.size() > s.name.size() && text.ends_with(s.name)) {
      factor = s.factor;
      number = text.substr(0, text.size() - s.name.size());
      break;
    }
  }
  const auto dot = number.find('.');
  const std::string_view whole = number.substr(0, dot);
  const std::string_view fraction = dot == std::string_view::npos ? std::string_view{} : number.substr(dot + 1);
  if (whole.empty() || whole.find_first_not_of("0123456789") != std::string_view::npos ||
      fraction.find_first_not_of("0123456789") != std::string_view::npos ||
      (dot != std::string_view::npos && fraction.empty())) {
    return bad("want a number with an optional suffix (Ki Mi Gi Ti Pi, k M G T P)");
  }
  std::uint64_t value = 0;
  if (std::from_chars(whole.data(), whole.data() + whole.size(), value).ec != std::errc() ||
      value > std::numeric_limits<std::uint64_t>::max() / factor) {
    return bad("too large");
  }
  value *= factor;
  // The fraction digits / 10^n times the suffix must be whole bytes.
  if (!fraction.empty()) {
    if (fraction.size() > 18) return bad("too many decimals");
    std::uint64_t digits = 0;
    std::uint64_t denominator = 1;
    for (char c : fraction) {
      digits = digits * 10 + static_cast<std::uint64_t>(c - '0');
      denominator *= 10;
    }
    // digits * factor / denominator, reduced first so it cannot overflow.
    const std::uint64_t g = std::gcd(digits, denominator);
    const std::uint64_t d = denominator / g;
    if (factor % d != 0) return bad("not a whole number of bytes");
    const std::uint64_t n = digits / g, f = factor / d;
    if (n != 0 && f > (std::numeric_limits<std::uint64_t>::max() - value) / n) return bad("too large");
    value += n * f;
  }
  return value;
}

std::string format_quantity(std::uint64_t bytes) {
  if (bytes == 0) return "0";
  for (std::size_t i = kBinarySuffixes; i-- > 0;) {  // Pi, Ti, Gi, Mi, Ki
    const auto& s = kSuffixes[i];
    if (bytes % s.factor == 0) return std::to_string(bytes / s.factor) + std::string(s.name);
  }
  return std::to_string(bytes);
}

}  // namespace numaserve
