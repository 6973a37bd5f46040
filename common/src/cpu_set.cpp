#include "numaserve/common/cpu_set.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <ostream>

namespace numaserve {
namespace {

constexpr std::string_view kSpace = " \t\r\n";

std::string_view strip(std::string_view s) {
  const auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

Result<unsigned> parse_id(std::string_view digits, std::string_view token) {
  unsigned value = 0;
  const auto* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc() || ptr != end) {
    return make_error(Error::Code::kInvalidArgument,
                      "bad token '" + std::string(token) + "' (want N or N-M)", std::string(token));
  }
  if (value > CpuSet::kMaxId) {
    return make_error(Error::Code::kInvalidArgument,
                      "id " + std::string(digits) + " in '" + std::string(token) +
                          "' exceeds the limit of " + std::to_string(CpuSet::kMaxId),
                      std::string(token));
  }
  return value;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

CpuSet::CpuSet(std::initializer_list<unsigned> ids) {
  for (unsigned id : ids) insert(id);
}

Result<CpuSet> CpuSet::parse_list(std::string_view text) {
  CpuSet set;
  text = strip(text);
  if (text.empty()) return set;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto comma = std::min(text.find(',', pos), text.size());
    const auto token = strip(text.substr(pos, comma - pos));
    const auto dash = token.find('-');
    auto first = parse_id(token.substr(0, dash), token);
    if (!first) return tl::unexpected(first.error());
    unsigned last = *first;
    if (dash != std::string_view::npos) {
      auto parsed_last = parse_id(token.substr(dash + 1), token);
      if (!parsed_last) return tl::unexpected(parsed_last.error());
      last = *parsed_last;
      if (last < *first) {
        return make_error(Error::Code::kInvalidArgument,
                          "bad token '" + std::string(token) + "' (range runs backwards)",
                          std::string(token));
      }
    }
    set |= range(*first, last);
    pos = comma + 1;
  }
  return set;
}

Result<CpuSet> CpuSet::parse_mask(std::string_view text) {
  text = strip(text);
  CpuSet set;
  if (text.empty()) {
    return make_error(Error::Code::kInvalidArgument, "empty hex mask");
  }
  std::vector<std::string_view> words;
  for (std::size_t pos = 0;;) {
    const auto comma = text.find(',', pos);
    words.push_back(text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  // The rightmost word holds ids 0-31.
  for (std::size_t i = 0; i < words.size(); ++i) {
    auto word = words[words.size() - 1 - i];
    // The kernel writes bare hex words; hwloc prefixes each with "0x".
    if (word.starts_with("0x") || word.starts_with("0X")) word.remove_prefix(2);
    if (word.empty() || word.size() > 8) {
      return make_error(Error::Code::kInvalidArgument,
                        "bad mask word '" + std::string(word) + "' (want 1-8 hex digits)",
                        std::string(word));
    }
    std::uint32_t value = 0;
    for (char c : word) {
      const int v = hex_value(c);
      if (v < 0) {
        return make_error(Error::Code::kInvalidArgument,
                          "bad mask word '" + std::string(word) + "' (not hex)", std::string(word));
      }
      value = (value << 4) | static_cast<std::uint32_t>(v);
    }
    for (unsigned bit = 0; bit < 32; ++bit) {
      if (!(value & (1u << bit))) continue;
      const std::size_t id = i * 32 + bit;
      if (id > kMaxId) {
        return make_error(Error::Code::kInvalidArgument,
                          "mask sets id " + std::to_string(id) + ", beyond the limit of " +
                              std::to_string(kMaxId),
                          std::string(word));
      }
      set.insert(static_cast<unsigned>(id));
    }
  }
  return set;
}

CpuSet CpuSet::range(unsigned first, unsigned last) {
  CpuSet set;
  if (last < first) return set;
  set.words_.resize(last / 64 + 1, 0);
  for (unsigned w = first / 64; w <= last / 64; ++w) {
    const unsigned lo = (w == first / 64) ? first % 64 : 0;
    const unsigned hi = (w == last / 64) ? last % 64 : 63;
    const std::uint64_t upper = hi == 63 ? ~std::uint64_t{0} : ((std::uint64_t{1} << (hi + 1)) - 1);
    set.words_[w] |= upper & ~((std::uint64_t{1} << lo) - 1);
  }
  return set;
}

std::string CpuSet::to_list() const {
  std::string out;
  const auto all = ids();
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j + 1 < all.size() && all[j + 1] == all[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(all[i]);
    if (j > i) out += '-' + std::to_string(all[j]);
    i = j + 1;
  }
  return out;
}

std::string CpuSet::to_mask() const {
  const std::size_t n32 = std::max<std::size_t>(1, words_.size() * 2);
  std::vector<std::uint32_t> w32(n32, 0);
  for (std::size_t i = 0; i < words_.size(); ++i) {
    w32[2 * i] = static_cast<std::uint32_t>(words_[i]);
    w32[2 * i + 1] = static_cast<std::uint32_t>(words_[i] >> 32);
  }
  while (w32.size() > 1 && w32.back() == 0) w32.pop_back();
  std::string out;
  for (std::size_t i = w32.size(); i-- > 0;) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", w32[i]);
    if (!out.empty()) out += ',';
    out += buf;
  }
  return out;
}

void CpuSet::insert(unsigned id) {
  if (words_.size() <= id / 64) words_.resize(id / 64 + 1, 0);
  words_[id / 64] |= std::uint64_t{1} << (id % 64);
}

void CpuSet::erase(unsigned id) {
  if (id / 64 >= words_.size()) return;
  words_[id / 64] &= ~(std::uint64_t{1} << (id % 64));
  trim();
}

bool CpuSet::contains(unsigned id) const {
  return id / 64 < words_.size() && (words_[id / 64] >> (id % 64)) & 1;
}

bool CpuSet::empty() const { return words_.empty(); }

std::size_t CpuSet::count() const {
  std::size_t n = 0;
  for (auto w : words_) n += static_cast<std::size_t>(std::popcount(w));
  return n;
}

std::vector<unsigned> CpuSet::ids() const {
  std::vector<unsigned> out;
  out.reserve(count());
  for (std::size_t w = 0; w < words_.size(); ++w) {
    for (auto bits = words_[w]; bits != 0; bits &= bits - 1) {
      out.push_back(static_cast<unsigned>(w * 64 + std::countr_zero(bits)));
    }
  }
  return out;
}

unsigned CpuSet::first() const {
  for (std::size_t w = 0; w < words_.size(); ++w) {
    if (words_[w]) return static_cast<unsigned>(w * 64 + std::countr_zero(words_[w]));
  }
  return 0;
}

bool CpuSet::is_subset_of(const CpuSet& other) const { return (*this - other).empty(); }

bool CpuSet::intersects(const CpuSet& other) const { return !(*this & other).empty(); }

CpuSet CpuSet::operator|(const CpuSet& other) const {
  CpuSet out = *this;
  out |= other;
  return out;
}

CpuSet CpuSet::operator&(const CpuSet& other) const {
  CpuSet out = *this;
  out &= other;
  return out;
}

CpuSet CpuSet::operator-(const CpuSet& other) const {
  CpuSet out = *this;
  out -= other;
  return out;
}

CpuSet& CpuSet::operator|=(const CpuSet& other) {
  if (words_.size() < other.words_.size()) words_.resize(other.words_.size(), 0);
  for (std::size_t w = 0; w < other.words_.size(); ++w) words_[w] |= other.words_[w];
  return *this;
}

CpuSet& CpuSet::operator-=(const CpuSet& other) {
  for (std::size_t w = 0; w < std::min(words_.size(), other.words_.size()); ++w) {
    words_[w] &= ~other.words_[w];
  }
  trim();
  return *this;
}

CpuSet& CpuSet::operator&=(const CpuSet& other) {
  words_.resize(std::min(words_.size(), other.words_.size()));
  for (std::size_t w = 0; w < words_.size(); ++w) words_[w] &= other.words_[w];
  trim();
  return *this;
}

bool CpuSet::operator==(const CpuSet& other) const { return words_ == other.words_; }

std::ostream& operator<<(std::ostream& out, const CpuSet& set) { return out << '"' << set.to_list() << '"'; }

void CpuSet::trim() {
  while (!words_.empty() && words_.back() == 0) words_.pop_back();
}

}  // namespace numaserve
