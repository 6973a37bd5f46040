#pragma once
// The agent's loop body, NFD-style: discover -> plan -> render -> publish
// (hint files, the API server, the kubelet drop-in), once per call. A
// failing stage is counted and reported; it never stops the loop. Discovery
// is published whatever the planner says: topology.json, the
// NodeResourceTopology and the labels go out without a plan, so a node
// never drops out of the scheduler's view.

#include <chrono>
#include <cstdint>
#include <functional>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apiserver/apiserver.h"
#include "discover/discover.h"
#include "plan/plan.h"
#include "publish/files.h"
#include "publish/fingerprint.h"

namespace numaserve::agent::updater {

struct UpdaterConfig {
  discover::DiscoverConfig discover;
  plan::PlanConfig plan;
  std::string node_name;
  std::filesystem::path hints_dir = "/var/lib/numaserve/hints";
  // Opt-in: also write the kubelet drop-in here (the kubelet's --config-dir).
  // The kubelet reads it at its next restart; the agent never restarts it.
  std::optional<std::filesystem::path> kubelet_dropin_dir;
  bool publish = true;  // false: discover and plan only (--no-publish)
  publish::FingerprintMethod fingerprint_method = publish::FingerprintMethod::kWithExclusiveResources;
  // In a cluster: where to server-side apply the NodeResourceTopology and labels.
  std::optional<kube::apiserver::ApiServerConfig> apiserver;
};

struct Counters {
  std::uint64_t cycles = 0;
  // By stage: discover, kubelet_files, podresources, plan, publish, apiserver.
  std::map<std::string, std::uint64_t> failures;
  std::uint64_t apiserver_retries = 0;
  std::uint64_t apiserver_unchanged = 0;  // applies skipped: the object was already so
  std::uint64_t podresources_retries = 0;
  std::uint64_t files_changed = 0;
  double last_success_unix_seconds = 0;
};

// What one cycle produced: whatever stages succeeded, and why others did not.
struct CycleResult {
  std::optional<discover::NodeReport> report;
  std::optional<plan::NodePlan> plan;
  std::vector<std::string> errors;
  bool ok() const { return errors.empty(); }
};

// What a cycle publishes, rendered from its discovery and plan alone.
struct Rendered {
  std::vector<publish::HintFile> hints;  // into hints_dir
  std::vector<std::string> stale_hints;  // the plan's files, removed from hints_dir while there is no plan
  // With an API server: what is applied to it.
  std::optional<nlohmann::json> node_resource_topology;
  std::optional<std::map<std::string, std::string>> labels;
  std::optional<std::string> kubelet_dropin;  // with kubelet_dropin_dir and a plan
};

// Pure: every rendering with a file, and the API server's objects.
Rendered render(const UpdaterConfig& config, const CycleResult& result);

class Updater {
 public:
  explicit Updater(UpdaterConfig config);

  // discover -> plan -> render -> publish; with publish off, the first two.
  CycleResult run_cycle();
  const Counters& counters() const { return counters_; }
  const UpdaterConfig& config() const { return config_; }

 private:
  // The node into result.report; false when there is none to plan or publish.
  bool discover(CycleResult& result);
  void plan(CycleResult& result);
  // The one place a cycle acts: files, the API server, the drop-in.
  void publish(const Rendered& rendered, CycleResult& result);
  // Files rewritten (or removed) by a publish step, or its failure.
  void count_written(const Result<std::vector<std::string>>& written, CycleResult& result);
  // A stage failed: counted, and its error in the cycle's result.
  void fail(CycleResult& result, const std::string& stage, const Error& error);
  // The allocations kept when the PodResources API fails, said to be stale.
  void keep_last_good(discover::NodeReport& report);
  // Applies `content` under `key` unless the same content was applied less
  // than kResync ago; a failed apply is tried again next cycle.
  void apply_if_changed(const std::string& key, const std::string& content, const std::function<Status()>& apply,
                        CycleResult& result);

  UpdaterConfig config_;
  Counters counters_;
  std::optional<kubelet::Allocations> last_good_;
  struct Applied {
    std::string content;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, Applied> applied_;  // by object: what the API server holds, as far as we know
};

// The drop-in's file name: the kubelet applies drop-ins in lexical order,
// so a high number lets these settings win over distribution defaults.
inline constexpr const char* kKubeletDropinName = "90-numaserve.conf";

// How long an applied object is trusted to be still there unchanged: after
// this it is applied again (someone may have deleted or edited it), like a
// controller's resync.
inline constexpr std::chrono::minutes kResync{10};

}  // namespace numaserve::agent::updater
