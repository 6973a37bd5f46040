#include "lifecycle/plan.h"

#include <algorithm>

namespace numaserve::lifecycle {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// Version numbers have no leading zeros: the shorter is the lower.
bool lower(const std::string& a, const std::string& b) { return a.size() != b.size() ? a.size() < b.size() : a < b; }

}  // namespace

std::string_view state_name(VersionState state) {
  switch (state) {
    case VersionState::kLoading: return "LOADING";
    case VersionState::kReady: return "READY";
    case VersionState::kUnloading: return "UNLOADING";
    case VersionState::kUnavailable: return "UNAVAILABLE";
  }
  return "UNAVAILABLE";
}

VersionPlan plan_versions(const VersionPlanInput& input) {
  const repository::ModelDir& model = *input.model;
  VersionPlan out;
  if (!model.policy) return out;  // a refused policy changes nothing
  out.want = wanted(*model.policy, model.versions);
  for (const auto& v : model.versions) {
    if (contains(input.served, v.number)) continue;
    if (!v.complete) {
      out.unavailable.push_back({v.number, v.why});
    } else if (!contains(out.want, v.number)) {
      out.unavailable.push_back({v.number, kNotWanted});
    } else if (const auto failed = input.failed.find(v.number);
               input.asked || failed == input.failed.end() || failed->second != v.fingerprint) {
      out.load.push_back(v.number);
    }
  }
  for (const auto& number : input.served) {
    if (!contains(out.want, number)) out.retire.push_back(number);
  }
  std::sort(out.retire.begin(), out.retire.end(), lower);
  out.retire_first = !input.availability && !out.load.empty();
  for (const auto& shown : input.shown) {
    const std::string& number = shown.first;  // not a structured binding: clang's lambdas cannot capture one
    const bool on_disk = std::any_of(model.versions.begin(), model.versions.end(), [&](const auto& v) { return v.number == number; });
    if (!on_disk && !contains(input.served, number) && shown.second != VersionState::kUnloading) out.forget.push_back(number);
  }
  return out;
}

std::vector<std::string> retire_after_loads(const VersionPlan& plan, const std::vector<std::string>& serving) {
  if (plan.retire_first) return {};  // gone before the loads
  std::vector<std::string> out = plan.retire;
  const bool wanted_serves = std::any_of(serving.begin(), serving.end(), [&](const auto& n) { return contains(plan.want, n); });
  if (!wanted_serves && !out.empty()) out.pop_back();  // the highest stays
  return out;
}

std::vector<std::string> restore(const VersionPlan& plan, const std::vector<std::string>& serving) {
  if (!plan.retire_first || !serving.empty()) return {};
  return plan.retire;
}

}  // namespace numaserve::lifecycle
