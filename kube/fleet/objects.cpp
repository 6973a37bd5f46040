// Reading the cluster's objects: Node and NodeResourceTopology YAML (or
// the agent's own NRT JSON) into FleetNodes, and a shape's machine class.
#include "fleet/fleet.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "numaserve/common/quantity.h"
#include "numaserve/common/yaml_file.h"

namespace numaserve::kube::fleet {
namespace {

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
}  // namespace numaserve::kube::fleet
