#include "report/svg.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "report/report.h"

namespace numaserve::agent::report {
namespace {

// Geometry in SVG user units (px).
constexpr int kCore = 46;      // a core box's width, and its least height
constexpr int kCoreGap = 6;
constexpr int kCoresPerRow = 8;
constexpr int kPad = 12;
constexpr int kTitle = 34;     // room for a node's or package's heading
constexpr int kLegend = 70;

// One color per replica slot on a node; reserved CPUs are grey.
constexpr const char* kSlotColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948"};
// CPUs a pod holds exclusively, whatever the plan meant them for.
constexpr const char* kHeldColor = "#e15759";

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Box {
  int w = 0, h = 0;
};

// Text width without a font engine: DejaVu Sans averages ~0.6 em per glyph
// (bold ~0.66); the boxes grow to fit their headings.
int text_width(const std::string& text, int font_px, bool bold = false) {
  std::size_t glyphs = 0;
  for (unsigned char c : text) glyphs += (c & 0xC0) != 0x80;  // count UTF-8 sequences once
  return static_cast<int>(static_cast<double>(glyphs) * font_px * (bold ? 0.66 : 0.6)) + 1;
}

std::string node_title(const NumaNode& node) {
  return "NUMA node " + std::to_string(node.os_index) + (node.kind.empty() ? "" : " (" + node.kind + ")") + " · " +
         format_bytes(node.memory_bytes) +
         (node.memory_only() ? " · memory only, near CPUs " +
                                   (node.local_cpus.empty() ? std::string("none") : node.local_cpus.to_list())
                             : "");
}

// A core box is tall enough for one line per SMT sibling.
int core_height(unsigned threads_per_core) { return std::max(kCore, 12 + 11 * static_cast<int>(threads_per_core)); }

Box node_box(const NumaNode& node, int core_h) {
  const int cores = std::max<int>(1, static_cast<int>(node.cores.size()));
  const int cols = std::min(cores, kCoresPerRow);
  const int rows = (cores + kCoresPerRow - 1) / kCoresPerRow;
  const int w = std::max({220, cols * (kCore + kCoreGap) - kCoreGap + 2 * kPad, text_width(node_title(node), 13) + 2 * kPad});
  const int h = node.memory_only() ? kTitle + 2 * kPad : kTitle + rows * (core_h + kCoreGap) - kCoreGap + 2 * kPad;
  return {w, h};
}

// Which replica slot each CPU would fall in: the plan's replicas take whole
// allocatable cores in order. The kubelet picks the actual CPUs; the picture
// shows how many fit and where they can go.
std::map<unsigned, int> slots_of(const NumaNode& node, const plan::NodePlan& plan, unsigned threads_per_core) {
  std::map<unsigned, int> out;
  const plan::NodeRoom* room = plan.room(node.os_index);
  const unsigned slots = room ? room->replicas : 0;
  const unsigned per_slot_cores = plan.pod.cpus / threads_per_core;
  unsigned core_index = 0;
  for (const auto& core : node.cores) {
    if (core.intersects(plan.kubelet.reserved_system_cpus) || core.count() != threads_per_core) continue;
    const unsigned slot = per_slot_cores == 0 ? slots : core_index / per_slot_cores;
    if (slot < slots) {
      for (unsigned cpu : core.ids()) out[cpu] = static_cast<int>(slot);
    }
    ++core_index;
  }
  return out;
}

// Which pod holds each CPU, as the kubelet reported it: "namespace/name".
std::map<unsigned, std::string> holders_of(const discover::NodeReport& report) {
  std::map<unsigned, std::string> out;
  if (!report.allocations) return out;
  for (const auto& pod : report.allocations->pods) {
    for (const auto& container : pod.containers) {
      for (unsigned cpu : container.cpus.ids()) out[cpu] = pod.pod_namespace + "/" + pod.name;
    }
  }
  return out;
}

// Packages side by side; each stacks its NUMA nodes. Nodes in no package
// (memory-only ones off-package, synthetic machines) get a column of their own.
struct Column {
  std::string title;
  std::vector<const NumaNode*> nodes;
};

std::vector<Column> columns_of(const Topology& t) {
  std::vector<Column> columns;
  NodeSet placed;
  for (const auto& pkg : t.packages) {
    Column col{"Package " + std::to_string(pkg.os_index) + " · CPUs " + (pkg.cpus.empty() ? "none" : pkg.cpus.to_list()), {}};
    for (unsigned id : pkg.nodes.ids()) {
      if (const NumaNode* n = t.node(id); n && !placed.contains(id)) {
        col.nodes.push_back(n);
        placed.insert(id);
      }
    }
    columns.push_back(std::move(col));
  }
  Column rest{"Machine", {}};
  for (const auto& node : t.nodes) {
    if (!placed.contains(node.os_index)) rest.nodes.push_back(&node);
  }
  if (!rest.nodes.empty()) columns.push_back(std::move(rest));
  return columns;
}

// What every node's drawing needs.
struct Drawing {
  const Topology& topology;
  const std::optional<plan::NodePlan>& plan;
  int core_h;
  std::map<unsigned, std::string> holders;  // first CPU of a held core -> its pod
  std::ostringstream body;

  // A core: coloured by who has it, its PUs one per line.
  void core(const CpuSet& core, int cx, int cy, const std::map<unsigned, int>& slots) {
    const bool reserved = plan && core.intersects(plan->kubelet.reserved_system_cpus);
    const auto slot = slots.find(core.first());
    const auto holder = holders.find(core.first());
    const char* fill = holder != holders.end() ? kHeldColor
                       : reserved              ? "#bbb"
                       : slot != slots.end()   ? kSlotColors[slot->second % 6]
                                               : "#e8e8e8";
    const std::string label = "core " + core.to_list() + (reserved ? ", reserved for the system" : "") +
                              (slot != slots.end() ? ", replica slot " + std::to_string(slot->second) : "") +
                              (holder != holders.end() ? ", held by pod " + holder->second : "");
    body << "<g class=\"core\"><title>" << escape(label) << "</title><rect x=\"" << cx << "\" y=\"" << cy
         << "\" width=\"" << kCore << "\" height=\"" << core_h << "\" rx=\"4\" fill=\"" << fill
         << "\" stroke=\"#333\"/>\n";
    const auto pus = core.ids();
    for (std::size_t p = 0; p < pus.size(); ++p) {
      body << "<text x=\"" << cx + kCore / 2 << "\" y=\"" << cy + 16 + static_cast<int>(p) * 11
           << "\" class=\"pu\">" << pus[p] << "</text>\n";
    }
    body << "</g>\n";
  }

  void node(const NumaNode& n, int nx, int y) {
    const Box b = node_box(n, core_h);
    body << "<g class=\"numa-node\"><rect x=\"" << nx << "\" y=\"" << y << "\" width=\"" << b.w << "\" height=\""
         << b.h << "\" rx=\"8\" fill=\"#fff\" stroke=\"#333\"" << (n.memory_only() ? " stroke-dasharray=\"6 4\"" : "")
         << "/>\n";
    body << "<text x=\"" << nx + kPad << "\" y=\"" << y + 22 << "\" class=\"n\">" << escape(node_title(n))
         << "</text>\n";
    const auto slots = plan ? slots_of(n, *plan, topology.threads_per_core()) : std::map<unsigned, int>{};
    for (std::size_t i = 0; i < n.cores.size(); ++i) {
      core(n.cores[i], nx + kPad + static_cast<int>(i % kCoresPerRow) * (kCore + kCoreGap),
           y + kTitle + static_cast<int>(i / kCoresPerRow) * (core_h + kCoreGap), slots);
    }
    body << "</g>\n";
  }

  // A package's column at x; returns its width and height.
  Box column(const Column& col, int x) {
    int w = std::max(260, text_width(col.title, 15, true) + 2 * kPad);
    int h = kTitle;
    for (const NumaNode* n : col.nodes) {
      const Box b = node_box(*n, core_h);
      w = std::max(w, b.w + 2 * kPad);
      h += b.h + kPad;
    }
    h += kPad;
    body << "<g class=\"package\"><rect x=\"" << x << "\" y=\"" << kPad << "\" width=\"" << w << "\" height=\"" << h
         << "\" rx=\"10\" fill=\"#f4f4f4\" stroke=\"#555\"/>\n";
    body << "<text x=\"" << x + kPad << "\" y=\"" << kPad + 22 << "\" class=\"h\">" << escape(col.title) << "</text>\n";
    int y = kPad + kTitle;
    for (const NumaNode* n : col.nodes) {
      node(*n, x + kPad, y);
      y += node_box(*n, core_h).h + kPad;
    }
    body << "</g>\n";
    return {w, h};
  }

  // Legend and the plan in one line, under everything at `height`.
  std::string legend(int height) const {
    std::ostringstream out;
    const int ly = height + 10;
    out << "<g class=\"legend\"><rect x=\"" << kPad << "\" y=\"" << ly << "\" width=\"14\" height=\"14\" fill=\"#bbb\" stroke=\"#333\"/>"
        << "<text x=\"" << kPad + 20 << "\" y=\"" << ly + 12 << "\" class=\"l\">reserved for the system</text>";
    out << "<rect x=\"" << kPad + 190 << "\" y=\"" << ly << "\" width=\"14\" height=\"14\" fill=\"" << kSlotColors[0]
        << "\" stroke=\"#333\"/><text x=\"" << kPad + 210 << "\" y=\"" << ly + 12
        << "\" class=\"l\">replica slot (colour per slot on a node)</text>";
    if (!holders.empty()) {
      out << "<rect x=\"" << kPad + 540 << "\" y=\"" << ly << "\" width=\"14\" height=\"14\" fill=\"" << kHeldColor
          << "\" stroke=\"#333\"/><text x=\"" << kPad + 560 << "\" y=\"" << ly + 12
          << "\" class=\"l\">held by a pod (its name in the core's tooltip)</text>";
    }
    out << "<rect x=\"" << kPad + 470 << "\" y=\"" << ly << "\" width=\"14\" height=\"14\" fill=\"#e8e8e8\" stroke=\"#333\"/>"
        << "<text x=\"" << kPad + 490 << "\" y=\"" << ly + 12 << "\" class=\"l\">free</text>";
    std::string summary = std::to_string(topology.nodes.size()) + " NUMA nodes, " +
                          std::to_string(topology.core_count()) + " cores, " +
                          std::to_string(topology.online_cpus.count()) + " CPUs";
    if (plan) {
      summary += " · replica " + std::to_string(plan->pod.cpus) + " CPUs / " + format_bytes(plan->pod.memory_bytes) +
                 ", " + std::to_string(plan->pod.replicas_per_machine) + " per machine";
    }
    out << "<text x=\"" << kPad << "\" y=\"" << ly + 40 << "\" class=\"l\">" << escape(summary) << "</text></g>\n";
    return out.str();
  }
};

}  // namespace

std::string render_svg(const discover::NodeReport& report, const std::optional<plan::NodePlan>& plan) {
  const Topology& t = report.topology;
  Drawing drawing{t, plan, core_height(t.threads_per_core()), holders_of(report), {}};
  int x = kPad;
  int height = 0;
  for (const auto& col : columns_of(t)) {
    const Box size = drawing.column(col, x);
    x += size.w + kPad;
    height = std::max(height, size.h + 2 * kPad);
  }
  const int width = std::max(x, 640);
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height + kLegend
      << "\" viewBox=\"0 0 " << width << " " << height + kLegend << "\" font-family=\"DejaVu Sans, sans-serif\">\n"
      << "<style>.h{font-size:15px;font-weight:bold}.n{font-size:13px}.pu{font-size:10px;text-anchor:middle}"
         ".l{font-size:12px}</style>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
      << drawing.body.str() << drawing.legend(height) << "</svg>\n";
  return svg.str();
}

}  // namespace numaserve::agent::report
