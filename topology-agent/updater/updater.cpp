#include "updater/updater.h"

#include <chrono>

#include "numaserve/common/topology_json.h"
#include "plan/plan_output.h"
#include "publish/files.h"
#include "publish/nrt.h"
#include "publish/yaml.h"
#include "report/svg.h"

namespace numaserve::agent::updater {

Updater::Updater(UpdaterConfig config) : config_(std::move(config)) {}

CycleResult Updater::run_cycle() {
  ++counters_.cycles;
  CycleResult result;
  auto fail = [&](const std::string& stage, const Error& error) {
    ++counters_.failures[stage];
    result.errors.push_back(stage + ": " + error.message);
  };

  auto report = discover::discover_node(config_.discover);
  if (!report) {
    fail("discover", report.error());
    return result;
  }
  result.report = std::move(*report);
  auto planned = plan::plan_node(result.report->topology, config_.plan);
  if (!planned) {
    fail("plan", planned.error());
    return result;
  }
  result.plan = std::move(*planned);

  if (config_.publish) {
    const auto nrt = publish::make_node_resource_topology(config_.node_name, *result.report, *result.plan);
    const std::string kubelet_config = plan::kubelet_config_yaml(*result.plan);
    auto written = publish::write_hints(
        config_.hints_dir, {{"topology.json", nlohmann::json(*result.report).dump(2) + "\n"},
                            {"plan.json", nlohmann::json(*result.plan).dump(2) + "\n"},
                            {"kubelet-config.yaml", kubelet_config},
                            {"helm-values.yaml", plan::helm_values_yaml(*result.plan)},
                            {"noderesourcetopology.yaml", publish::to_yaml(nrt)},
                            {"node.svg", report::render_svg(*result.report, *result.plan)}});
    if (!written) {
      fail("publish", written.error());
    } else {
      counters_.files_changed += written->size();
    }
    if (config_.apiserver) {
      apiserver::ApiServer api(*config_.apiserver);
      for (const Status& applied :
           {api.apply_node_resource_topology(nrt),
            api.apply_node_labels(config_.node_name, publish::make_node_labels(*result.report, *result.plan))}) {
        if (!applied) fail("apiserver", applied.error());
      }
      counters_.apiserver_retries += api.retries();
    }
    if (config_.kubelet_dropin_dir) {
      auto dropin = publish::write_hints(*config_.kubelet_dropin_dir, {{kKubeletDropinName, kubelet_config}});
      if (!dropin) {
        fail("publish", dropin.error());
      } else {
        counters_.files_changed += dropin->size();
      }
    }
  }
  if (result.ok()) {
    counters_.last_success_unix_seconds =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  return result;
}

}  // namespace numaserve::agent::updater
