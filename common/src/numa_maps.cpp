#include "numaserve/common/numa_maps.h"

#include <charconv>
#include <sstream>
#include <string>

namespace numaserve {
namespace {

template <typename T>
bool parse_number(std::string_view s, T& out, int base = 10) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

// A line is "<hex start> <policy> key=value ... N<node>=<pages> ...", see
// proc(5). Only the start address, the N<node>= counters and the page size
// matter here; other keys are skipped so new kernel fields do not break us.
// What the kernel cannot have written is refused, naming the line: a page
// size of 0 or above the largest any architecture has (16 GiB), a node
// counted twice, or pages that would not fit a 57-bit address space — so
// every byte count made from the result fits in 64 bits.
Result<std::vector<NumaMapping>> parse_numa_maps(std::string_view text) {
  constexpr std::uint64_t kAddressSpace = std::uint64_t{1} << 57;
  constexpr std::uint64_t kLargestPageKiB = std::uint64_t{16} << 20;
  std::vector<NumaMapping> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  int line_no = 0;
  std::uint64_t mapped = 0;  // bytes counted on all lines so far
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto refuse = [&](const std::string& what, const std::string& field) {
      return make_error(Error::Code::kInvalidArgument, "numa_maps line " + std::to_string(line_no) + ": " + what,
                        field);
    };
    std::istringstream fields(line);
    std::string word;
    fields >> word;
    NumaMapping mapping;
    if (!parse_number(word, mapping.start, 16)) return refuse("bad address '" + word + "'", word);
    std::uint64_t pages_on_line = 0;
    while (fields >> word) {
      const auto eq = word.find('=');
      if (eq == std::string::npos) continue;
      const std::string_view key(word.data(), eq);
      const std::string_view value(word.data() + eq + 1, word.size() - eq - 1);
      if (key.size() > 1 && key[0] == 'N') {
        unsigned node = 0;
        std::uint64_t pages = 0;
        if (!parse_number(key.substr(1), node) || !parse_number(value, pages)) {
          return refuse("bad counter '" + word + "'", word);
        }
        if (mapping.pages_per_node.contains(node)) return refuse("node " + std::to_string(node) + " counted twice", word);
        if (pages > kAddressSpace - pages_on_line) return refuse("more pages than an address space holds", word);
        pages_on_line += pages;
        mapping.pages_per_node[node] = pages;
      } else if (key == "kernelpagesize_kB") {
        std::uint64_t kb = 0;
        if (!parse_number(value, kb) || kb == 0 || kb > kLargestPageKiB) {
          return refuse("bad page size '" + word + "'", word);
        }
        mapping.page_bytes = kb * 1024;
      }
    }
    // The page size comes after the counters, so the bytes are checked here.
    if (pages_on_line > (kAddressSpace - mapped) / mapping.page_bytes) {
      return refuse("more pages than an address space holds", "N");
    }
    mapped += pages_on_line * mapping.page_bytes;
    out.push_back(std::move(mapping));
  }
  return out;
}

std::map<unsigned, std::uint64_t> bytes_per_node(const std::vector<NumaMapping>& mappings) {
  std::map<unsigned, std::uint64_t> out;
  for (const auto& m : mappings) {
    for (const auto& [node, pages] : m.pages_per_node) out[node] += pages * m.page_bytes;
  }
  return out;
}

}  // namespace numaserve
