#include "updater/updater.h"

#include <chrono>

#include "plan/plan_output.h"
#include "publish/files.h"
#include "publish/nrt.h"
#include "publish/renderings.h"

namespace numaserve::agent::updater {
Updater::Updater(UpdaterConfig config) : config_(std::move(config)) {}

void Updater::keep_last_good(discover::NodeReport& report) {
  counters_.podresources_retries += report.podresources_retries;
  if (report.allocations_error.empty()) {
    if (report.allocations) last_good_ = report.allocations;
    return;
  }
  ++counters_.failures["podresources"];
  if (last_good_) {
    report.allocations = last_good_;
    report.allocations->stale = true;
    report.warnings.push_back("PodResources: publishing the last good view of the pods' allocations, now stale");
  }
}

void Updater::apply_if_changed(const std::string& key, const std::string& content,
                               const std::function<Status()>& apply, CycleResult& result) {
  const auto now = std::chrono::steady_clock::now();
  if (const auto it = applied_.find(key); it != applied_.end() && it->second.content == content &&
                                          now - it->second.at < kResync) {
    ++counters_.apiserver_unchanged;
    return;
  }
  if (const Status applied = apply(); !applied) {
    fail(result, "apiserver", applied.error());
    applied_.erase(key);
    return;
  }
  applied_[key] = {content, now};
}

void Updater::fail(CycleResult& result, const std::string& stage, const Error& error) {
  ++counters_.failures[stage];
  result.errors.push_back(stage + ": " + error.message);
}

CycleResult Updater::run_cycle() {
  ++counters_.cycles;
  CycleResult result;
  auto count_written = [&](const Result<std::vector<std::string>>& written) {
    if (!written) {
      fail(result, "publish", written.error());
    } else {
      counters_.files_changed += written->size();
    }
  };

  auto report = discover::discover_node(config_.discover);
  if (!report) {
    fail(result, "discover", report.error());
    return result;
  }
  result.report = std::move(*report);
  for (const Error& error : result.report->kubelet_file_errors) fail(result, "kubelet_files", error);
  keep_last_good(*result.report);
  if (auto planned = plan::plan_node(result.report->topology, config_.plan)) {
    result.plan = std::move(*planned);
  } else {
    fail(result, "plan", planned.error());
  }
  if (!config_.publish) return result;

  // Every rendering with a file; without a plan, the plan's are removed.
  const publish::RenderInput input{*result.report, result.plan, config_.node_name, config_.fingerprint_method};
  std::vector<publish::HintFile> hints;
  std::vector<std::string> stale;
  for (const auto& rendering : publish::renderings()) {
    if (rendering.hint_file.empty()) continue;
    if (rendering.needs_plan && !result.plan) {
      stale.emplace_back(rendering.hint_file);
    } else {
      hints.push_back({std::string(rendering.hint_file), rendering.render(input)});
    }
  }
  if (!stale.empty()) count_written(publish::remove_hints(config_.hints_dir, stale));
  count_written(publish::write_hints(config_.hints_dir, hints));
  const plan::Plan* plan = result.plan ? &*result.plan : nullptr;
  if (config_.apiserver) {
    apiserver::ApiServer api(*config_.apiserver);
    const auto nrt =
        publish::make_node_resource_topology(config_.node_name, *result.report, plan, config_.fingerprint_method);
    const auto labels = publish::make_node_labels(*result.report, plan);
    apply_if_changed("nrt", nrt.dump(), [&] { return api.apply_node_resource_topology(nrt); }, result);
    apply_if_changed("labels", nlohmann::json(labels).dump(),
                     [&] { return api.apply_node_labels(config_.node_name, labels); }, result);
    counters_.apiserver_retries += api.retries();
  }
  if (config_.kubelet_dropin_dir && plan) {
    count_written(publish::write_hints(*config_.kubelet_dropin_dir, {{kKubeletDropinName, plan::kubelet_config_yaml(*plan)}}));
  }
  if (result.ok()) {
    counters_.last_success_unix_seconds =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  return result;
}

}  // namespace numaserve::agent::updater
