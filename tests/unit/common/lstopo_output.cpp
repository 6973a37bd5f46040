#include "lstopo_output.h"

#include <regex>
#include <sstream>
#include <vector>

#include "numaserve/common/text_file.h"

namespace numaserve::testing {
namespace {

// An object whose subtree is still being read: its PUs so far and the NUMA
// nodes attached to it (whose CPUs are all of this object's PUs).
struct Frame {
  std::size_t indent;
  CpuSet pus;
  std::vector<unsigned> nodes;
};

}  // namespace

Result<LstopoOutput> parse_lstopo_output(const std::filesystem::path& file) {
  auto text = read_text_file(file);
  if (!text) return tl::unexpected(text.error());

  // Object lines: "<indent>Type[(subtype)] [L#<logical>] [(P#<os> attrs...)]".
  // The tree ends at the "depth 0:" summary.
  static const std::regex object(R"(^( *)([A-Za-z][A-Za-z0-9]*)(\([^)]*\))?(?: L#(\d+))?(?: \((.*))?$)");
  static const std::regex os_index(R"(^P#(\d+))");
  static const std::regex local_kb(R"(local=(\d+)KB)");
  static const std::regex matrix_header(R"(^Relative latency matrix \(name NUMALatency)");
  static const std::regex not_represented(R"(^\d+ processors not represented in topology: (\S+))");

  LstopoOutput out;
  std::map<unsigned, unsigned> os_of_logical;
  std::vector<std::string> lines;
  {
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }

  std::vector<Frame> stack;
  auto close_to = [&](std::size_t indent) {
    while (!stack.empty() && stack.back().indent >= indent) {
      Frame done = std::move(stack.back());
      stack.pop_back();
      for (unsigned node : done.nodes) out.nodes[node].cpus = done.pus;
      if (!stack.empty()) stack.back().pus |= done.pus;
    }
  };
  std::size_t i = 0;
  for (; i < lines.size() && !lines[i].starts_with("depth 0:"); ++i) {
    std::smatch m;
    if (!std::regex_match(lines[i], m, object)) continue;
    const std::size_t indent = static_cast<std::size_t>(m[1].length());
    close_to(indent);
    const std::string type = m[2];
    const std::string attrs = m[5];
    std::smatch p;
    const bool has_os = std::regex_search(attrs, p, os_index);
    const unsigned os = has_os ? static_cast<unsigned>(std::stoul(p[1])) : 0;
    const unsigned logical = m[4].matched ? static_cast<unsigned>(std::stoul(m[4])) : 0;
    if (type == "PU" && has_os) {
      if (!stack.empty()) stack.back().pus.insert(os);
    } else if (type == "NUMANode" && has_os) {
      LstopoNode node;
      node.logical_index = logical;
      std::smatch kb;
      if (std::regex_search(attrs, kb, local_kb)) node.local_kb = std::stoull(kb[1]);
      out.nodes[os] = node;
      os_of_logical[logical] = os;
      if (!stack.empty()) stack.back().nodes.push_back(os);
    } else {
      stack.push_back({indent, {}, {}});
    }
  }
  close_to(0);

  for (; i < lines.size(); ++i) {
    std::smatch m;
    if (std::regex_search(lines[i], m, not_represented)) {
      auto mask = CpuSet::parse_mask(m[1].str());
      if (!mask) return tl::unexpected(std::move(mask.error()).with_context(file.string()));
      out.not_represented = *mask;
      continue;
    }
    if (!std::regex_search(lines[i], matrix_header) || i + 1 >= lines.size()) continue;
    std::istringstream header(lines[++i]);
    std::string word;
    header >> word;  // "index"
    std::vector<unsigned> columns;
    for (unsigned logical; header >> logical;) columns.push_back(logical);
    for (std::size_t row = 0; row < columns.size() && i + 1 < lines.size(); ++row) {
      std::istringstream values(lines[++i]);
      unsigned from_logical = 0;
      values >> from_logical;
      for (unsigned to_logical : columns) {
        unsigned value = 0;
        values >> value;
        out.latency[{os_of_logical[from_logical], os_of_logical[to_logical]}] = value;
      }
    }
  }
  return out;
}

}  // namespace numaserve::testing
