#pragma once
// The version lifecycle's rules, pure: given a model as the repository now
// holds it (scan), what serves and what failed before, which versions to
// load, which to retire and what the index says about the rest. The
// manager (manager.h) acts on the plan (loads, warm-ups, retirement on its own thread) and
// asks the two follow-ups once the loads have run; every rule lives here,
// tested by table (tests/unit/lifecycle/plan_test.cpp):
//   - only complete versions the policy wants are loaded; the others show
//     UNAVAILABLE with why (being written, not wanted);
//   - a version that failed to load is not tried again until its files
//     change (its fingerprint) or a load call names its model;
//   - availability policy (the default): load first, then retire what the
//     policy no longer wants, but never the last version serving unless a
//     version the policy wants serves (the highest is kept);
//   - resource policy: retire and free first (one version in memory), load,
//     and if nothing serves then, load the retired versions back;
//   - a version gone from disk that does not serve leaves the index (one
//     being unloaded stays until it is freed).
// Labels are the model table's: it refuses one that names a version not
// serving (ModelTable::set_labels).

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "repository/repository.h"

namespace numaserve::lifecycle {

// A version's state in the index (Triton's repository extension's words).
enum class VersionState { kLoading, kReady, kUnloading, kUnavailable };
std::string_view state_name(VersionState state);  // "LOADING", "READY", ...

// Why a version does not serve, as the index and a rescan both say it.
inline constexpr const char* kNotWanted = "not wanted by the version policy";

struct VersionPlanInput {
  const repository::ModelDir* model = nullptr;     // as just scanned; its policy parsed
  std::vector<std::string> served;  // versions serving now
  std::map<std::string, VersionState> shown;    // the index's versions now
  std::map<std::string, std::string> failed;    // version -> the fingerprint that failed to load
  bool asked = false;                           // a load call: failed versions are tried again
  bool availability = true;                     // --reload-policy availability (else resource)
};

struct Unavailable {
  std::string version;
  std::string reason;
  bool operator==(const Unavailable&) const = default;
};

struct VersionPlan {
  std::vector<std::string> want;           // what the policy wants, lowest first
  std::vector<Unavailable> unavailable;    // not to be loaded, and why
  std::vector<std::string> load;           // lowest first
  std::vector<std::string> retire;         // serving, no longer wanted
  bool retire_first = false;               // resource policy with something to load
  std::vector<std::string> forget;         // index entries to drop
};

VersionPlan plan_versions(const VersionPlanInput& input);

// After the loads, with `serving` what serves then: which of plan.retire go
// (availability: all, unless that leaves nothing the policy wants serving;
// then the highest stays).
std::vector<std::string> retire_after_loads(const VersionPlan& plan, const std::vector<std::string>& serving);

// Resource policy, after the loads: the retired versions to load back
// because nothing serves.
std::vector<std::string> restore(const VersionPlan& plan, const std::vector<std::string>& serving);

}  // namespace numaserve::lifecycle
