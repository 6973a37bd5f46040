// Sizing the fleet: machine classes, one replica size per class or one for
// the whole fleet, and the plan as text, JSON and Helm values.
#include "fleet/fleet.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "numaserve/common/quantity.h"
#include "numaserve/common/yaml_file.h"

namespace numaserve::kube::fleet {
namespace {

constexpr std::uint64_t kMi = 1ull << 20;

using Hugepages = std::map<std::string, std::uint64_t>;  // "hugepages-2Mi" -> bytes

tl::unexpected<Error> bad(std::string message) { return make_error(Error::Code::kInvalidArgument, std::move(message)); }

std::string reason_not_plannable(const FleetNode& node, const Shape* shape) {
  if (!shape) return "no NodeResourceTopology (no agent publishes for it)";
  if (!node.labels.contains(label::kNumaNodes)) return "no numaserve.io labels (no agent labels it)";
  if (shape->policy.empty()) return "its NodeResourceTopology does not say the Topology Manager's policy";
  if (shape->policy != "single-numa-node") return "Topology Manager policy " + shape->policy + ", not single-numa-node";
  if (shape->scope != "pod") return "Topology Manager scope " + shape->scope + ", not pod";
  if (shape->zones.empty()) return "no NUMA zone with allocatable CPUs";
  return "";
}

// The class with its replica size, or its nodes unplanned for `why` when
// no replica fits.
void settle(FleetPlan& plan, ClassPlan c, unsigned cpus, std::uint64_t memory, unsigned per_machine,
            const std::string& why, const Hugepages& hugepages) {
  if (cpus == 0 || memory == 0 || per_machine == 0) {
    for (const auto& n : c.nodes) plan.unplanned.push_back({n, why});
    return;
  }
  c.cpus = cpus;
  c.memory_bytes = memory;
  c.replicas_per_machine = per_machine;
  c.hugepages = hugepages;
  plan.classes.push_back(std::move(c));
}

// Replicas a zone's hugepages hold ( ~0u when none are asked).
unsigned hugepage_room(const Zone& z, const Hugepages& ask) {
  unsigned room = ~0u;
  for (const auto& [name, bytes] : ask) {
    const auto it = z.hugepages.find(name);
    const std::uint64_t have = it == z.hugepages.end() ? 0 : it->second;
    room = static_cast<unsigned>(std::min<std::uint64_t>(room, bytes == 0 ? ~0u : have / bytes));
  }
  return room;
}

std::string names_of(const Hugepages& ask) {
  std::string out;
  for (const auto& [name, bytes] : ask) out += (out.empty() ? "" : ", ") + format_quantity(bytes) + " of " + name;
  return out;
}

// The largest multiple of `step` not above n.
unsigned round_down(unsigned n, unsigned step) { return step == 0 ? n : n / step * step; }

// Threads per core as the Node's labels say (1 when they do not).
unsigned threads_per_core_of(const std::map<std::string, std::string>& labels) {
  const auto tpc = labels.find(label::kThreadsPerCore);
  unsigned threads = 1;
  if (tpc != labels.end()) {
    std::from_chars(tpc->second.data(), tpc->second.data() + tpc->second.size(), threads);
  } else if (labels.contains(label::kSmt) && labels.at(label::kSmt) == "true") {
    threads = 2;  // labels of an agent older than threads-per-core
  }
  return std::max(1u, threads);
}

using Classes = std::map<std::string, ClassPlan>;  // by machine_class()

// The plannable nodes grouped by machine class; the others unplanned, with why.
Classes classes_of(const std::vector<FleetNode>& nodes, FleetPlan& plan) {
  Classes classes;
  for (const auto& node : nodes) {
    std::optional<Shape> shape = node.shape;
    if (shape) shape->threads_per_core = threads_per_core_of(node.labels);
    if (const std::string why = reason_not_plannable(node, shape ? &*shape : nullptr); !why.empty()) {
      plan.unplanned.push_back({node.name, why});
      continue;
    }
    const std::string name = machine_class(*shape);
    auto it = classes.try_emplace(name, ClassPlan{name, *shape, {}, 0, 0, 0, {}}).first;
    it->second.nodes.push_back(node.name);
  }
  return classes;
}

// A replica's memory when `share` replicas split a zone: `fraction` of it,
// in whole MiB.
std::uint64_t memory_for(const Zone& z, unsigned share, double fraction) {
  return static_cast<std::uint64_t>(static_cast<double>(z.memory_bytes) * fraction / share) / kMi * kMi;
}

// Each class: the replica that fills one NUMA zone of its smallest, k per
// zone; zones without allocatable memory hold none.
void size_per_class(Classes& classes, const FleetConfig& config, FleetPlan& plan) {
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
      memory = std::min(memory, memory_for(z, k, config.pod_memory_fraction));
    }
    if (zones == 0) cpus = 0;
    settle(plan, std::move(c), cpus, memory, zones * k,
           with_memory == 0 ? "no NUMA zone with CPUs has allocatable memory"
           : zones == 0     ? "no NUMA zone has " + names_of(ask) + " for each of " + std::to_string(k) + " replica(s)"
                            : "no NUMA zone holds " + std::to_string(k) + " replica(s) of a whole core",
           ask);
  }
}

// One replica size measured against the whole fleet (--sizing uniform):
// how many replicas of it each zone holds, and the share of the fleet's
// allocatable CPUs they put to work.
class UniformFit {
 public:
  UniformFit(const Classes& classes, const Hugepages& ask) : classes_(classes), ask_(ask) {
    for (const auto& [name, c] : classes) {
      step_ = std::lcm(step_, c.shape.threads_per_core);
      for (const auto& z : c.shape.zones) {
        if (z.memory_bytes > 0) largest_ = std::max(largest_, z.cpus);
        allocatable_ += std::uint64_t{z.cpus} * c.nodes.size();
      }
    }
  }

  // Zones without allocatable memory hold none.
  unsigned replicas_in(const Zone& z, unsigned size) const {
    return z.memory_bytes == 0 ? 0 : std::min(z.cpus / size, hugepage_room(z, ask_));
  }

  double use_of(unsigned size) const {
    std::uint64_t used = 0;
    for (const auto& [name, c] : classes_) {
      for (const auto& z : c.shape.zones) used += std::uint64_t{replicas_in(z, size)} * size * c.nodes.size();
    }
    return allocatable_ == 0 ? 0.0 : static_cast<double>(used) / static_cast<double>(allocatable_);
  }

  // The largest size, a multiple of every class's threads per core, whose
  // use reaches `min_use`; failing that, the best use, said in a note.
  // 0 when no zone holds a core.
  unsigned choose(double min_use, std::vector<std::string>& notes) const {
    unsigned best = 0;
    for (unsigned size = round_down(largest_, step_); size >= step_ && size > 0; size -= step_) {
      const double use = use_of(size);
      if (best == 0 || use > use_of(best) + 1e-12) best = size;
      if (size > step_ && use + 1e-12 >= min_use) return size;
    }
    if (best != 0) {
      char line[200];
      std::snprintf(line, sizeof line,
                    "no size of more than one core puts %.0f%% of the CPUs to work: took %u CPUs, the best use (%.1f%%)",
                    min_use * 100, best, use_of(best) * 100);
      notes.emplace_back(line);
    }
    return best;
  }

 private:
  const Classes& classes_;
  const Hugepages& ask_;
  unsigned step_ = 1;
  unsigned largest_ = 0;  // CPUs of the largest zone with memory
  std::uint64_t allocatable_ = 0;
};

// One CPU size for all. Memory is each class's own: the share of a zone's
// memory each of its replicas gets, at the class's tightest zone (a
// fleet-wide figure would hand every machine the smallest machine's memory).
void size_uniform(Classes& classes, const FleetConfig& config, FleetPlan& plan) {
  const auto& ask = config.hugepages_per_replica;
  const UniformFit fit(classes, ask);
  const unsigned chosen = fit.choose(config.uniform_min_use, plan.notes);
  const std::string too_small = "no NUMA zone holds the fleet's replica of " + std::to_string(chosen) + " CPUs" +
                                (ask.empty() ? "" : " and " + names_of(ask));
  for (auto& [name, c] : classes) {
    unsigned per_machine = 0;
    std::uint64_t memory = ~std::uint64_t{0};
    for (const auto& z : c.shape.zones) {
      const unsigned n = chosen == 0 ? 0 : fit.replicas_in(z, chosen);
      per_machine += n;
      if (n > 0) memory = std::min(memory, memory_for(z, n, config.pod_memory_fraction));
    }
    const bool any_memory = std::any_of(c.shape.zones.begin(), c.shape.zones.end(),
                                        [](const Zone& z) { return z.memory_bytes > 0; });
    settle(plan, std::move(c), chosen, per_machine == 0 ? 0 : memory, per_machine,
           any_memory ? too_small : "no NUMA zone with CPUs has allocatable memory", ask);
  }
}

}  // namespace


Result<Sizing> parse_sizing(std::string_view text) {
  if (const auto sizing = kSizingNames.parse(text)) return *sizing;
  return bad("--sizing: want " + kSizingNames.choices() + ", not '" + std::string(text) + "'");
}

Result<Hugepages> parse_hugepages(std::string_view text) {
  Hugepages out;
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

std::string_view to_string(Sizing sizing) { return kSizingNames.name(sizing); }

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

unsigned FleetPlan::smallest_replica_cpus() const {
  unsigned least = 0;
  for (const auto& c : classes) {
    if (c.replicas_per_machine > 0 && !c.nodes.empty() && (least == 0 || c.cpus < least)) least = c.cpus;
  }
  return least;
}

double FleetPlan::equal_split_share() const {
  std::uint64_t replicas = 0;
  for (const auto& c : classes) replicas += c.replicas();
  const std::uint64_t used = cpus_used();
  return used == 0 ? 0 : static_cast<double>(smallest_replica_cpus() * replicas) / static_cast<double>(used);
}

Result<FleetPlan> plan_fleet(const std::vector<FleetNode>& nodes, const FleetConfig& config) {
  if (config.replicas_per_numa_node == 0) return bad("--replicas-per-numa-node: want at least 1");
  FleetPlan plan;
  plan.sizing = config.sizing;
  Classes classes = classes_of(nodes, plan);
  if (config.sizing == Sizing::kPerClass) {
    size_per_class(classes, config, plan);
  } else {
    size_uniform(classes, config, plan);
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
                            {"replicas_per_machine", c.replicas_per_machine},
                            {"replicas", c.replicas()},
                            {"replica", {{"cpus", c.cpus}, {"memory_bytes", c.memory_bytes}, {"hugepages", c.hugepages}}},
                            {"cpus_used", c.cpus_used()},
                            {"cpus_allocatable", c.cpus_allocatable()},
                            {"machine", {{"zones", zones},
                                         {"threads_per_core", c.shape.threads_per_core},
                                         {"topology_manager_policy", c.shape.policy},
                                         {"topology_manager_scope", c.shape.scope}}}});
  }
  for (const auto& u : plan.unplanned) j["unplanned"].push_back({{"node", u.node}, {"reason", u.reason}});
  j["fleet"] = {{"cpus_used", plan.cpus_used()}, {"cpus_allocatable", plan.cpus_allocatable()},
                {"equal_split_share", plan.equal_split_share()}};
}

std::string render_text(const FleetPlan& plan) {
  std::ostringstream out;
  char line[320];
  out << "sizing: " << to_string(plan.sizing) << "\n";
  for (const auto& c : plan.classes) {
    std::snprintf(line, sizeof line, "%s: %zu node(s), %zu NUMA zone(s) of %u CPUs (smallest), %u thread(s) per core\n",
                  c.name.c_str(), c.nodes.size(), c.shape.zones.size(),
                  std::min_element(c.shape.zones.begin(), c.shape.zones.end(),
                                   [](const Zone& a, const Zone& b) { return a.cpus < b.cpus; })->cpus,
                  c.shape.threads_per_core);
    out << line;
    std::snprintf(line, sizeof line, "  %u replica(s) per node of %u CPU / %s%s: %llu replica(s), %llu of %llu CPUs at work\n",
                  c.replicas_per_machine, c.cpus, format_quantity(c.memory_bytes).c_str(),
                  c.hugepages.empty() ? "" : (" / " + names_of(c.hugepages)).c_str(),
                  static_cast<unsigned long long>(c.replicas()), static_cast<unsigned long long>(c.cpus_used()),
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
  if (const double share = plan.equal_split_share(); share < 1) {
    std::snprintf(line, sizeof line,
                  "traffic: one Service through kube-proxy puts %.0f%% of the planned CPUs to work (the %u-CPU replicas "
                  "saturate first); an HTTPRoute weighting each class's Service by its CPUs, or --sizing uniform, "
                  "puts them all to work\n",
                  100 * share, plan.smallest_replica_cpus());
    out << line;
  }
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
                       {"replicasPerMachine", c.replicas_per_machine},
                       {"resources", {{"requests", amount}, {"limits", amount}}}});
  }
  return {{"classes", classes}};
}

}  // namespace numaserve::kube::fleet