#include "updater/updater.h"

#include <chrono>

#include "numaserve/common/duration.h"
#include "plan/plan_output.h"
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
  if (!discover(result)) return result;
  plan(result);
  if (!config_.publish) return result;
  publish(render(config_, result), result);
  if (result.ok()) counters_.last_success_unix_seconds = to_seconds(std::chrono::system_clock::now().time_since_epoch());
  return result;
}

bool Updater::discover(CycleResult& result) {
  auto report = discover::discover_node(config_.discover);
  if (!report) {
    fail(result, "discover", report.error());
    return false;
  }
  result.report = std::move(*report);
  for (const Error& error : result.report->kubelet_file_errors) fail(result, "kubelet_files", error);
  keep_last_good(*result.report);
  return true;
}

void Updater::plan(CycleResult& result) {
  if (auto planned = plan::plan_node(result.report->topology, config_.plan)) {
    result.plan = std::move(*planned);
  } else {
    fail(result, "plan", planned.error());
  }
}

Rendered render(const UpdaterConfig& config, const CycleResult& result) {
  Rendered out;
  // Every rendering with a file; without a plan, the plan's are removed.
  const publish::RenderInput input{*result.report, result.plan, config.node_name, config.fingerprint_method};
  for (const auto& rendering : publish::renderings()) {
    if (rendering.hint_file.empty()) continue;
    if (rendering.needs_plan && !result.plan) {
      out.stale_hints.emplace_back(rendering.hint_file);
    } else {
      out.hints.push_back({std::string(rendering.hint_file), rendering.render(input)});
    }
  }
  const plan::NodePlan* plan = result.plan ? &*result.plan : nullptr;
  if (config.apiserver) {
    out.node_resource_topology =
        publish::make_node_resource_topology(config.node_name, *result.report, plan, config.fingerprint_method);
    out.labels = publish::make_node_labels(*result.report, plan);
  }
  if (config.kubelet_dropin_dir && plan) out.kubelet_dropin = plan::kubelet_config_yaml(*plan);
  return out;
}

void Updater::publish(const Rendered& rendered, CycleResult& result) {
  if (!rendered.stale_hints.empty()) count_written(publish::remove_hints(config_.hints_dir, rendered.stale_hints), result);
  count_written(publish::write_hints(config_.hints_dir, rendered.hints), result);
  if (config_.apiserver) {
    kube::apiserver::ApiServer api(*config_.apiserver);
    const auto& nrt = *rendered.node_resource_topology;
    const auto& labels = *rendered.labels;
    apply_if_changed("nrt", nrt.dump(), [&] { return api.apply_node_resource_topology(nrt); }, result);
    apply_if_changed("labels", nlohmann::json(labels).dump(),
                     [&] { return api.apply_node_labels(config_.node_name, labels); }, result);
    counters_.apiserver_retries += api.retries();
  }
  if (rendered.kubelet_dropin) {
    count_written(publish::write_hints(*config_.kubelet_dropin_dir, {{kKubeletDropinName, *rendered.kubelet_dropin}}),
                  result);
  }
}

void Updater::count_written(const Result<std::vector<std::string>>& written, CycleResult& result) {
  if (!written) {
    fail(result, "publish", written.error());
  } else {
    counters_.files_changed += written->size();
  }
}

}  // namespace numaserve::agent::updater
