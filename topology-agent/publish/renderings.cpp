#include "publish/renderings.h"

#include "numaserve/common/topology_json.h"
#include "plan/plan_output.h"
#include "publish/nrt.h"
#include "publish/yaml.h"
#include "report/svg.h"

namespace numaserve::agent::publish {
namespace {

std::string text(const RenderInput& in) {
  std::string out = plan::render_text(*in.plan);
  for (const auto& warning : in.report.warnings) out += "warning: " + warning + "\n";
  return out;
}

std::string labels(const RenderInput& in) {
  std::string out;
  for (const auto& [key, value] : make_node_labels(in.report, in.plan ? &*in.plan : nullptr)) {
    out += key + "=" + value + "\n";
  }
  return out;
}

std::string nrt(const RenderInput& in) {
  return to_yaml(make_node_resource_topology(in.node_name, in.report, in.plan ? &*in.plan : nullptr,
                                             in.fingerprint_method));
}

}  // namespace

const std::vector<Rendering>& renderings() {
  static const std::vector<Rendering> kRenderings = {
      {"text", "", true, &text},
      {"json", "plan.json", true, [](const RenderInput& in) { return nlohmann::json(*in.plan).dump(2) + "\n"; }},
      {"yaml", "", true, [](const RenderInput& in) { return to_yaml(nlohmann::json(*in.plan)); }},
      {"nrt", "noderesourcetopology.yaml", false, &nrt},
      {"labels", "", false, &labels},
      {"kubelet-config", "kubelet-config.yaml", true,
       [](const RenderInput& in) { return plan::kubelet_config_yaml(*in.plan); }},
      {"helm-values", "helm-values.yaml", true, [](const RenderInput& in) { return plan::helm_values_yaml(*in.plan); }},
      {"topology", "topology.json", false,
       [](const RenderInput& in) { return nlohmann::json(in.report).dump(2) + "\n"; }},
      {"svg", "node.svg", false, [](const RenderInput& in) { return report::render_svg(in.report, in.plan); }},
  };
  return kRenderings;
}

const Rendering* find_rendering(std::string_view name) {
  for (const auto& r : renderings()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

}  // namespace numaserve::agent::publish
