// What the operator reads from the API server (operator/pool/):
// a JSON document taken as a ServingPool, and as the Node and
// NodeResourceTopology lists, and as the pool's previous status. Never a
// crash (nlohmann's throwing accessors on a field of another type would be
// one); a refused pool names its field; a pool that parses, on a two-class
// fleet, gets per class one Deployment and one PDB (a Service and a route
// when it asks) whose names are DNS
// labels and whose selector picks its own pods, each already "containing"
// itself (so a pass after an apply sends nothing).
#include <nlohmann/json.hpp>

#include "fuzz.h"
#include "pool/compare.h"
#include "pool/objects.h"
#include "pool/pool.h"
#include "pool/refusals.h"
#include "pool/status.h"

using namespace numaserve::op;
using nlohmann::json;

namespace {

json zone(int id, int cpus, const char* memory) {
  return {{"name", "node-" + std::to_string(id)},
          {"type", "Node"},
          {"resources", {{{"name", "cpu"}, {"capacity", std::to_string(cpus + 2)}, {"allocatable", std::to_string(cpus)}},
                         {{"name", "memory"}, {"capacity", memory}, {"allocatable", memory}}}}};
}

// Two machine generations, as the API server lists them (items without kind).
const json& nodes() {
  static const json list = {
      {"items",
       {{{"metadata", {{"name", "e5"}, {"labels", {{"numaserve.io/numa-nodes", "2"}, {"numaserve.io/threads-per-core", "2"}}}}}},
        {{"metadata", {{"name", "gold"}, {"labels", {{"numaserve.io/numa-nodes", "2"}, {"numaserve.io/threads-per-core", "2"}}}}}}}}};
  return list;
}
const json& nrts() {
  const json attributes = {{{"name", "topologyManagerPolicy"}, {"value", "single-numa-node"}},
                           {{"name", "topologyManagerScope"}, {"value", "pod"}}};
  static const json list = {
      {"items",
       {{{"metadata", {{"name", "e5"}}}, {"zones", {zone(0, 26, "120Gi"), zone(1, 26, "120Gi")}}, {"attributes", attributes}},
        {{"metadata", {{"name", "gold"}}}, {"zones", {zone(0, 46, "180Gi"), zone(1, 46, "180Gi")}}, {"attributes", attributes}}}}};
  return list;
}

bool dns_label(const std::string& s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const json doc = json::parse(numaserve::fuzz::text(data, size), nullptr, false);
  if (doc.is_discarded()) return 0;
  // The document as lists: never a crash, whatever it holds.
  (void)pool::fleet_of(doc, doc, {});
  (void)pool::fleet_of(nodes(), doc, {{"a", "b"}});
  (void)pool::refused_at_admission(doc);
  auto parsed = pool::parse_pool(doc);
  if (!parsed) {
    FUZZ_CHECK(!parsed.error().field.empty(), "a refusal without a field: %s", parsed.error().message.c_str());
    return 0;
  }
  auto fleet = pool::fleet_of(nodes(), nrts(), parsed->node_selector);
  FUZZ_CHECK(fleet.has_value(), "%s", "the fixed fleet did not read");
  auto plan = numaserve::kube::fleet::plan_fleet(*fleet, parsed->sizing);
  pool::Refusals refusals;
  const json previous = doc.contains("status") ? doc["status"] : json::object();
  if (!plan) {
    pool::PassReport failed;
    failed.error = plan.error().message;
    failed.fault = "NoPlan";
    (void)pool::pool_status(*parsed, nullptr, failed, refusals, previous, "t", {});
    return 0;
  }
  const auto objects = pool::desired_objects(*parsed, *plan);
  const std::size_t per_class = 2 + (parsed->service_ports.empty() ? 0 : 1);
  const std::size_t expected = per_class * plan->classes.size() + (parsed->route_parents.empty() ? 0 : 1);
  FUZZ_CHECK(objects.size() == expected, "%zu objects for %zu classes", objects.size(), plan->classes.size());
  for (const json& o : objects) {
    const std::string name = o["metadata"]["name"];
    FUZZ_CHECK(dns_label(name), "object name '%s' is not a DNS label", name.c_str());
    FUZZ_CHECK(pool::first_difference(o, o).empty(), "%s does not contain itself at %s", name.c_str(),
               pool::first_difference(o, o).c_str());
    if (o["kind"] == "Deployment") {
      const json& labels = o["spec"]["template"]["metadata"]["labels"];
      for (const auto& [k, v] : o["spec"]["selector"]["matchLabels"].items()) {
        FUZZ_CHECK(labels.contains(k) && labels[k] == v, "%s: its selector's %s is not on its pods", name.c_str(), k.c_str());
      }
    }
  }
  (void)pool::pool_status(*parsed, &*plan, {}, refusals, previous, "t", {});
  return 0;
}
