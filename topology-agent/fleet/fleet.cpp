#include "fleet/fleet.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <sstream>

#include "numaserve/common/quantity.h"
#include "numaserve/common/yaml_file.h"

namespace numaserve::agent::fleet {
namespace {

constexpr std::uint64_t kMi = 1ull << 20;

tl::unexpected<Error> bad(std::string message) { return make_error(Error::Code::kInvalidArgument, std::move(message)); }

// A quantity of the NRT: a JSON number, or the string Kubernetes prints.
Result<std::uint64_t> bytes_of(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_string()) return parse_quantity(value.get<std::string>());
  return bad("not a quantity");
}

// CPUs: whole ones ("14", 14, "14000m").
Result<unsigned> cpus_of(const nlohmann::json& value) {
  std::string text = value.is_number_unsigned() ? std::to_string(value.get<std::uint64_t>())
                     : value.is_string()        ? value.get<std::string>()
                                                : std::string();
  std::uint64_t scale = 1;
  if (!text.empty() && text.back() == 'm') {
    text.pop_back();
    scale = 1000;
  }
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n % scale != 0 || n / scale > 1u << 20) {
    return bad("not a whole number of CPUs");
  }
  return static_cast<unsigned>(n / scale);
}

std::string attribute(const nlohmann::json& nrt, const std::string& name) {
  if (!nrt.contains("attributes") || !nrt["attributes"].is_array()) return "";
  for (const auto& a : nrt["attributes"]) {
    // value() would throw on a name that is not a string (fuzz: `{name, value: pod}`).
    if (a.is_object() && a.contains("name") && a["name"].is_string() && a["name"].get<std::string>() == name &&
        a.contains("value") && a["value"].is_string()) {
      return a["value"].get<std::string>();
    }
  }
  return "";
}

// FNV-1a, 64 bits: stable across builds and machines, unlike std::hash.
std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A YAML node as JSON: scalars as strings (quantities are parsed later).
nlohmann::json to_json_value(const YamlNode& node) {
  if (node.is_map()) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& [key, value] : node.entries()) object[key.text().value_or("")] = to_json_value(value);
    return object;
  }
  if (node.is_sequence()) {
    nlohmann::json array = nlohmann::json::array();
    for (const auto& item : node.items()) array.push_back(to_json_value(item));
    return array;
  }
  if (node.is_null()) return nullptr;
  return node.text().value_or("");
}

// Multi-document YAML: the documents and the line each starts on.
std::vector<std::pair<std::string, int>> documents(std::string_view text) {
  std::vector<std::pair<std::string, int>> docs(1, {"", 1});
  int line = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view row = text.substr(start, end - start);
    ++line;
    if (row.substr(0, 3) == "---" && (row.size() == 3 || row[3] == ' ' || row[3] == '\t' || row[3] == '\r')) {
      docs.emplace_back("", line + 1);
    } else {
      docs.back().first.append(row).push_back('\n');
    }
    start = end + 1;
  }
  return docs;
}

std::string reason_not_plannable(const FleetNode& node, const Shape* shape) {
  if (!shape) return "no NodeResourceTopology (no agent publishes for it)";
  if (!node.labels.contains("numaserve.io/numa-nodes")) return "no numaserve.io labels (no agent labels it)";
  if (shape->policy.empty()) return "its NodeResourceTopology does not say the Topology Manager's policy";
  if (shape->policy != "single-numa-node") return "Topology Manager policy " + shape->policy + ", not single-numa-node";
  if (shape->scope != "pod") return "Topology Manager scope " + shape->scope + ", not pod";
  if (shape->zones.empty()) return "no NUMA zone with allocatable CPUs";
  return "";
}

// The class with its replica size, or its nodes unplanned for `why` when
// no replica fits.
void settle(FleetPlan& plan, ClassPlan c, unsigned cpus, std::uint64_t memory, unsigned per_node,
            const std::string& why, const std::map<std::string, std::uint64_t>& hugepages) {
  if (cpus == 0 || memory == 0 || per_node == 0) {
    for (const auto& n : c.nodes) plan.unplanned.push_back({n, why});
    return;
  }
  c.cpus = cpus;
  c.memory_bytes = memory;
  c.replicas_per_node = per_node;
  c.hugepages = hugepages;
  plan.classes.push_back(std::move(c));
}

// Replicas a zone's hugepages hold ( ~0u when none are asked).
unsigned hugepage_room(const Zone& z, const std::map<std::string, std::uint64_t>& ask) {
  unsigned room = ~0u;
  for (const auto& [name, bytes] : ask) {
    const auto it = z.hugepages.find(name);
    const std::uint64_t have = it == z.hugepages.end() ? 0 : it->second;
    room = std::min<std::uint64_t>(room, bytes == 0 ? ~0u : have / bytes);
  }
  return room;
}

std::string names_of(const std::map<std::string, std::uint64_t>& ask) {
  std::string out;
  for (const auto& [name, bytes] : ask) out += (out.empty() ? "" : ", ") + format_quantity(bytes) + " of " + name;
  return out;
}

// The largest multiple of `step` not above n.
unsigned round_down(unsigned n, unsigned step) { return step == 0 ? n : n / step * step; }

}  // namespace

Result<Shape> shape_of(const nlohmann::json& nrt, unsigned threads_per_core) {
  Shape shape;
  shape.threads_per_core = std::max(1u, threads_per_core);
  shape.policy = attribute(nrt, "topologyManagerPolicy");
  shape.scope = attribute(nrt, "topologyManagerScope");
  if (!nrt.contains("zones") || !nrt["zones"].is_array()) return bad("zones: want a list");
  for (std::size_t i = 0; i < nrt["zones"].size(); ++i) {
    const auto& z = nrt["zones"][i];
    const std::string where = "zones[" + std::to_string(i) + "]";
    if (!z.is_object() || !z.contains("name") || !z["name"].is_string()) return bad(where + ".name: want a string");
    Zone zone{z["name"].get<std::string>(), 0, 0, {}};
    if (!z.contains("resources") || !z["resources"].is_array()) return bad(where + ".resources: want a list");
    bool has_cpu = false;
    for (std::size_t r = 0; r < z["resources"].size(); ++r) {
      const auto& res = z["resources"][r];
      const std::string field = where + ".resources[" + std::to_string(r) + "]";
      if (!res.is_object() || !res.contains("name") || !res["name"].is_string() || !res.contains("allocatable")) {
        return bad(field + ": want a name and an allocatable quantity");
      }
      const std::string name = res["name"].get<std::string>();
      if (name == "cpu") {
        auto cpus = cpus_of(res["allocatable"]);
        if (!cpus) return bad(field + ".allocatable: " + cpus.error().message);
        zone.cpus = *cpus;
        has_cpu = true;
      } else if (name == "memory" || name.starts_with("hugepages-")) {
        auto bytes = bytes_of(res["allocatable"]);
        if (!bytes) return bad(field + ".allocatable: " + bytes.error().message);
        if (name == "memory") {
          zone.memory_bytes = *bytes;
        } else if (*bytes > 0) {
          zone.hugepages[name] = *bytes;
        }
      }
    }
    // A zone of memory only has no cpu resource; one with CPUs but none
    // allocatable holds no replica either.
    if (has_cpu && zone.cpus > 0) shape.zones.push_back(std::move(zone));
  }
  std::sort(shape.zones.begin(), shape.zones.end(), [](const Zone& a, const Zone& b) { return a.name < b.name; });
  return shape;
}

std::string machine_class(const Shape& shape) {
  std::ostringstream key;
  key << "tpc=" << shape.threads_per_core << ";policy=" << shape.policy << ";scope=" << shape.scope;
  for (const auto& z : shape.zones) {
    key << ";" << z.name << ":cpu=" << z.cpus << ",memory=" << z.memory_bytes;
    for (const auto& [name, bytes] : z.hugepages) key << "," << name << "=" << bytes;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(key.str())));
  return "mc-" + std::string(hex, 10);
}

Result<std::vector<FleetNode>> read_objects(std::string_view text, const std::string& source) {
  std::vector<FleetNode> nodes;
  auto node_named = [&nodes](const std::string& name) -> FleetNode& {
    for (auto& n : nodes) {
      if (n.name == name) return n;
    }
    return nodes.emplace_back(FleetNode{name, {}, std::nullopt});
  };
  for (const auto& [doc, first_line] : documents(text)) {
    auto parsed = parse_yaml(doc, source);
    if (!parsed) return bad(parsed.error().message);
    if (parsed->is_null() || !*parsed) continue;
    const auto at = [&, first = first_line](const YamlNode& n) {
      return source + " line " + std::to_string(first + std::max(n.line(), 1) - 1);
    };
    std::vector<YamlNode> objects;
    if (!parsed->is_map()) return bad(at(*parsed) + ": want Kubernetes objects, not " + (parsed->is_sequence() ? "a list" : "a scalar"));
    if ((*parsed)["kind"].text() == "List") {
      if (!(*parsed)["items"].is_sequence()) return bad(at(*parsed) + ": List: items: want a list");
      objects = (*parsed)["items"].items();
    } else {
      objects.push_back(*parsed);
    }
    for (const auto& object : objects) {
      const auto kind = object["kind"].text().value_or("");
      const auto name = object["metadata"]["name"].text().value_or("");
      if (kind != "Node" && kind != "NodeResourceTopology") {
        return bad(at(object) + ": kind " + (kind.empty() ? "(none)" : kind) +
                     ": want Node or NodeResourceTopology objects");
      }
      if (name.empty()) return bad(at(object) + ": " + kind + ": metadata.name: want a name");
      const std::string what = at(object) + ": " + kind + " " + name;
      FleetNode& node = node_named(name);
      if (kind == "Node") {
        const YamlNode labels = object["metadata"]["labels"];
        if (labels && !labels.is_null() && !labels.is_map()) return bad(what + ": metadata.labels: want a map");
        if (labels.is_map()) {
          for (const auto& [key, value] : labels.entries()) {
            node.labels[key.text().value_or("")] = value.text().value_or("");
          }
        }
      } else {
        auto shape = shape_of(to_json_value(object), 1);
        if (!shape) return bad(what + ": " + shape.error().message);
        node.shape = std::move(*shape);
      }
    }
  }
  return nodes;
}

std::vector<FleetNode> merge(std::vector<std::vector<FleetNode>> sources) {
  std::vector<FleetNode> merged;
  for (auto& source : sources) {
    for (auto& node : source) {
      auto it = std::find_if(merged.begin(), merged.end(), [&](const FleetNode& n) { return n.name == node.name; });
      if (it == merged.end()) {
        merged.push_back(std::move(node));
        continue;
      }
      it->labels.insert(node.labels.begin(), node.labels.end());
      if (node.shape) it->shape = std::move(node.shape);
    }
  }
  return merged;
}

Result<Sizing> parse_sizing(std::string_view text) {
  if (text == "per-class") return Sizing::kPerClass;
  if (text == "uniform") return Sizing::kUniform;
  return bad("--sizing: want per-class or uniform, not '" + std::string(text) + "'");
}

Result<std::map<std::string, std::uint64_t>> parse_hugepages(std::string_view text) {
  std::map<std::string, std::uint64_t> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    start = comma + 1;
    const std::size_t eq = item.find('=');
    const std::string name(item.substr(0, eq));
    if (eq == std::string_view::npos || !name.starts_with("hugepages-") || name.size() == 10) {
      return bad("--hugepages-per-replica: want hugepages-<size>=<quantity>, not '" + std::string(item) + "'");
    }
    auto bytes = parse_quantity(item.substr(eq + 1));
    if (!bytes || *bytes == 0) {
      return bad("--hugepages-per-replica: " + name + ": '" + std::string(item.substr(eq + 1)) + "' is not a quantity");
    }
    out[name] = *bytes;
  }
  return out;
}

std::string_view to_string(Sizing sizing) { return sizing == Sizing::kUniform ? "uniform" : "per-class"; }

std::uint64_t ClassPlan::cpus_allocatable() const {
  std::uint64_t per_node = 0;
  for (const auto& z : shape.zones) per_node += z.cpus;
  return per_node * nodes.size();
}

std::uint64_t FleetPlan::cpus_used() const {
  std::uint64_t n = 0;
  for (const auto& c : classes) n += c.cpus_used();
  return n;
}

std::uint64_t FleetPlan::cpus_allocatable() const {
  std::uint64_t n = 0;
  for (const auto& c : classes) n += c.cpus_allocatable();
  return n;
}

Result<FleetPlan> plan_fleet(const std::vector<FleetNode>& nodes, const FleetConfig& config) {
  if (config.replicas_per_numa_node == 0) return bad("--replicas-per-numa-node: want at least 1");
  FleetPlan plan;
  plan.sizing = config.sizing;
  std::map<std::string, ClassPlan> classes;
  for (const auto& node : nodes) {
    std::optional<Shape> shape = node.shape;
    if (shape) {
      const auto tpc = node.labels.find("numaserve.io/threads-per-core");
      unsigned threads = 1;
      if (tpc != node.labels.end()) {
        std::from_chars(tpc->second.data(), tpc->second.data() + tpc->second.size(), threads);
      } else if (node.labels.contains("numaserve.io/smt") && node.labels.at("numaserve.io/smt") == "true") {
        threads = 2;  // labels of an agent older than threads-per-core
      }
      shape->threads_per_core = std::max(1u, threads);
    }
    if (const std::string why = reason_not_plannable(node, shape ? &*shape : nullptr); !why.empty()) {
      plan.unplanned.push_back({node.name, why});
      continue;
    }
    const std::string name = machine_class(*shape);
    auto it = classes.try_emplace(name, ClassPlan{name, *shape, {}, 0, 0, 0}).first;
    it->second.nodes.push_back(node.name);
  }

  const auto memory_for = [&](const Zone& z, unsigned share) {
    return static_cast<std::uint64_t>(static_cast<double>(z.memory_bytes) * config.pod_memory_fraction / share) / kMi * kMi;
  };
  if (config.sizing == Sizing::kPerClass) {
    // Each class: the replica that fills one NUMA zone of its smallest, k
    // per zone; zones without allocatable memory hold none.
    const unsigned k = config.replicas_per_numa_node;
    const auto& ask = config.hugepages_per_replica;
    for (auto& [name, c] : classes) {
      unsigned cpus = ~0u, zones = 0, with_memory = 0;
      std::uint64_t memory = ~std::uint64_t{0};
      for (const auto& z : c.shape.zones) {
        if (z.memory_bytes == 0) continue;
        ++with_memory;
        if (hugepage_room(z, ask) < k) continue;
        ++zones;
        cpus = std::min(cpus, round_down(z.cpus / k, c.shape.threads_per_core));
        memory = std::min(memory, memory_for(z, k));
      }
      if (zones == 0) cpus = 0;
      settle(plan, std::move(c), cpus, memory, zones * k,
             with_memory == 0 ? "no NUMA zone with CPUs has allocatable memory"
             : zones == 0     ? "no NUMA zone has " + names_of(ask) + " for each of " + std::to_string(k) + " replica(s)"
                              : "no NUMA zone holds " + std::to_string(k) + " replica(s) of a whole core",
             ask);
    }
  } else {
    // One CPU size for all: the largest whose fleet-wide use reaches the
    // minimum. Zones without allocatable memory hold none. Memory is each
    // class's own: the share of a zone's memory each of its replicas gets,
    // at the class's tightest zone (a fleet-wide figure would hand every
    // machine the smallest machine's memory).
    unsigned step = 1, largest = 0;
    std::uint64_t allocatable = 0;
    for (const auto& [name, c] : classes) {
      step = std::lcm(step, c.shape.threads_per_core);
      for (const auto& z : c.shape.zones) {
        if (z.memory_bytes > 0) largest = std::max(largest, z.cpus);
        allocatable += std::uint64_t{z.cpus} * c.nodes.size();
      }
    }
    const auto replicas_in = [&](const Zone& z, unsigned size) {
      return z.memory_bytes == 0 ? 0 : std::min(z.cpus / size, hugepage_room(z, config.hugepages_per_replica));
    };
    const auto use_of = [&](unsigned size) {
      std::uint64_t used = 0;
      for (const auto& [name, c] : classes) {
        for (const auto& z : c.shape.zones) used += std::uint64_t{replicas_in(z, size)} * size * c.nodes.size();
      }
      return allocatable == 0 ? 0.0 : static_cast<double>(used) / static_cast<double>(allocatable);
    };
    unsigned chosen = 0, best = 0;
    for (unsigned size = round_down(largest, step); size >= step && size > 0; size -= step) {
      const double use = use_of(size);
      if (best == 0 || use > use_of(best) + 1e-12) best = size;
      if (size > step && use + 1e-12 >= config.uniform_min_use) {
        chosen = size;
        break;
      }
    }
    if (chosen == 0 && best != 0) {
      chosen = best;
      char line[200];
      std::snprintf(line, sizeof line,
                    "no size of more than one core puts %.0f%% of the CPUs to work: took %u CPUs, the best use (%.1f%%)",
                    config.uniform_min_use * 100, best, use_of(best) * 100);
      plan.notes.emplace_back(line);
    }
    for (auto& [name, c] : classes) {
      unsigned per_node = 0;
      std::uint64_t memory = ~std::uint64_t{0};
      for (const auto& z : c.shape.zones) {
        const unsigned n = chosen == 0 ? 0 : replicas_in(z, chosen);
        per_node += n;
        if (n > 0) memory = std::min(memory, memory_for(z, n));
      }
      const bool any_memory = std::any_of(c.shape.zones.begin(), c.shape.zones.end(),
                                          [](const Zone& z) { return z.memory_bytes > 0; });
      settle(plan, std::move(c), chosen, per_node == 0 ? 0 : memory, per_node,
             !any_memory ? "no NUMA zone with CPUs has allocatable memory"
             : config.hugepages_per_replica.empty()
                 ? "no NUMA zone holds the fleet's replica of " + std::to_string(chosen) + " CPUs"
                 : "no NUMA zone holds the fleet's replica of " + std::to_string(chosen) + " CPUs and " +
                       names_of(config.hugepages_per_replica),
             config.hugepages_per_replica);
    }
  }
  if (plan.classes.empty()) {
    std::string why = "no node can be planned:";
    for (const auto& u : plan.unplanned) why += "\n  " + u.node + ": " + u.reason;
    if (plan.unplanned.empty()) why += " no Node or NodeResourceTopology objects";
    return bad(why);
  }
  return plan;
}

void to_json(nlohmann::json& j, const FleetPlan& plan) {
  j = {{"sizing", std::string(to_string(plan.sizing))}, {"classes", nlohmann::json::array()},
       {"unplanned", nlohmann::json::array()}, {"notes", plan.notes}};
  for (const auto& c : plan.classes) {
    nlohmann::json zones = nlohmann::json::array();
    for (const auto& z : c.shape.zones) {
      zones.push_back({{"name", z.name}, {"cpus", z.cpus}, {"memory_bytes", z.memory_bytes}, {"hugepages", z.hugepages}});
    }
    j["classes"].push_back({{"name", c.name},
                            {"nodes", c.nodes},
                            {"replicas_per_node", c.replicas_per_node},
                            {"replicas", c.replicas_per_node * c.nodes.size()},
                            {"replica", {{"cpus", c.cpus}, {"memory_bytes", c.memory_bytes}, {"hugepages", c.hugepages}}},
                            {"cpus_used", c.cpus_used()},
                            {"cpus_allocatable", c.cpus_allocatable()},
                            {"machine", {{"zones", zones},
                                         {"threads_per_core", c.shape.threads_per_core},
                                         {"topology_manager_policy", c.shape.policy},
                                         {"topology_manager_scope", c.shape.scope}}}});
  }
  for (const auto& u : plan.unplanned) j["unplanned"].push_back({{"node", u.node}, {"reason", u.reason}});
  j["fleet"] = {{"cpus_used", plan.cpus_used()}, {"cpus_allocatable", plan.cpus_allocatable()}};
}

std::string render_text(const FleetPlan& plan) {
  std::ostringstream out;
  char line[256];
  out << "sizing: " << to_string(plan.sizing) << "\n";
  for (const auto& c : plan.classes) {
    std::snprintf(line, sizeof line, "%s: %zu node(s), %zu NUMA zone(s) of %u CPUs (smallest), %u thread(s) per core\n",
                  c.name.c_str(), c.nodes.size(), c.shape.zones.size(),
                  std::min_element(c.shape.zones.begin(), c.shape.zones.end(),
                                   [](const Zone& a, const Zone& b) { return a.cpus < b.cpus; })->cpus,
                  c.shape.threads_per_core);
    out << line;
    std::snprintf(line, sizeof line, "  %u replica(s) per node of %u CPU / %s%s: %zu replica(s), %llu of %llu CPUs at work\n",
                  c.replicas_per_node, c.cpus, format_quantity(c.memory_bytes).c_str(),
                  c.hugepages.empty() ? "" : (" / " + names_of(c.hugepages)).c_str(),
                  c.replicas_per_node * c.nodes.size(), static_cast<unsigned long long>(c.cpus_used()),
                  static_cast<unsigned long long>(c.cpus_allocatable()));
    out << line;
    std::string names;
    for (const auto& n : c.nodes) names += (names.empty() ? "" : " ") + n;
    out << "  nodes: " << names << "\n";
  }
  for (const auto& u : plan.unplanned) out << "unplanned: " << u.node << ": " << u.reason << "\n";
  std::snprintf(line, sizeof line, "fleet: %llu of %llu allocatable CPUs at work (%.1f%%)\n",
                static_cast<unsigned long long>(plan.cpus_used()), static_cast<unsigned long long>(plan.cpus_allocatable()),
                plan.cpus_allocatable() ? 100.0 * static_cast<double>(plan.cpus_used()) / static_cast<double>(plan.cpus_allocatable())
                                        : 0.0);
  out << line;
  for (const auto& n : plan.notes) out << "note: " << n << "\n";
  return out.str();
}

nlohmann::json helm_values(const FleetPlan& plan) {
  nlohmann::json classes = nlohmann::json::array();
  for (const auto& c : plan.classes) {
    nlohmann::json amount = {{"cpu", c.cpus}, {"memory", format_quantity(c.memory_bytes)}};
    for (const auto& [name, bytes] : c.hugepages) amount[name] = format_quantity(bytes);
    classes.push_back({{"name", c.name},
                       {"nodes", c.nodes.size()},
                       {"replicasPerNode", c.replicas_per_node},
                       {"resources", {{"requests", amount}, {"limits", amount}}}});
  }
  return {{"classes", classes}};
}

}  // namespace numaserve::agent::fleet
