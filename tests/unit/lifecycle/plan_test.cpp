#include "lifecycle/plan.h"

#include <gtest/gtest.h>

#include <sstream>

namespace numaserve::lifecycle {
namespace {

using repository::ModelDir;
using repository::Policy;
using repository::VersionDir;

// "1,3" -> {"1", "3"}
std::vector<std::string> list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

VersionDir version(const std::string& number, bool complete = true, const std::string& why = "at start-up") {
  return VersionDir{number, "/repo/m/" + number, complete, why, "fingerprint-" + number};
}

Policy latest(std::size_t n) { return Policy{Policy::Kind::kLatest, n, {}, {}}; }
Policy specific(const std::string& numbers) { return Policy{Policy::Kind::kSpecific, 1, list(numbers), {}}; }
Policy all() { return Policy{Policy::Kind::kAll, 1, {}, {}}; }

constexpr const char* kBeingWritten = "being written in place: waiting for the marker COMPLETE";

// A repository change, as the scan after it reads the model, from versions 1
// and 2 on disk with what each policy serves of them.
struct Change {
  const char* name;
  std::vector<VersionDir> disk;
  std::map<std::string, std::string> failed;  // version -> fingerprint that failed
  bool asked = false;
  std::map<std::string, std::string> labels;
};

// What the plan must say, for one policy under one change.
struct Expected {
  std::string load, retire;      // lists: "3", "1,2", ""
  std::string unavailable;       // "1,3": versions shown UNAVAILABLE, in order
};

struct Row {
  const char* policy_name;
  Policy policy;
  std::string served;  // what serves before the change
  std::map<std::string, Expected> by_change;
};

TEST(VersionPlan, EveryPolicyUnderEveryRepositoryChange) {
  const std::vector<Change> changes = {
      {"added", {version("1"), version("2"), version("3")}, {}, false, {}},
      {"removed", {version("1")}, {}, false, {}},
      // Version 3 failed to load before with these very files: not tried again...
      {"corrupt", {version("1"), version("2"), version("3")}, {{"3", "fingerprint-3"}}, false, {}},
      // ...unless a load call names the model...
      {"corrupt, load call", {version("1"), version("2"), version("3")}, {{"3", "fingerprint-3"}}, true, {}},
      // ...or its files change.
      {"corrupt, then rewritten", {version("1"), version("2"), version("3")}, {{"3", "an older fingerprint"}}, false, {}},
      {"half-copied", {version("1"), version("2"), version("3", false, kBeingWritten)}, {}, false, {}},
      {"relabelled", {version("1"), version("2")}, {}, false, {{"stable", "1"}}},
  };
  const std::vector<Row> rows = {
      {"latest 1", latest(1), "2",
       {{"added", {"3", "2", "1"}},
        {"removed", {"1", "2", ""}},
        {"corrupt", {"", "2", "1"}},
        {"corrupt, load call", {"3", "2", "1"}},
        {"corrupt, then rewritten", {"3", "2", "1"}},
        {"half-copied", {"", "", "1,3"}},
        {"relabelled", {"", "", "1"}}}},
      {"latest 2", latest(2), "1,2",
       {{"added", {"3", "1", ""}},
        {"removed", {"", "2", ""}},
        {"corrupt", {"", "1", ""}},
        {"corrupt, load call", {"3", "1", ""}},
        {"corrupt, then rewritten", {"3", "1", ""}},
        {"half-copied", {"", "", "3"}},
        {"relabelled", {"", "", ""}}}},
      {"specific [1, 3]", specific("1,3"), "1",
       {{"added", {"3", "", "2"}},
        {"removed", {"", "", ""}},
        {"corrupt", {"", "", "2"}},
        {"corrupt, load call", {"3", "", "2"}},
        {"corrupt, then rewritten", {"3", "", "2"}},
        {"half-copied", {"", "", "2,3"}},
        {"relabelled", {"", "", "2"}}}},
      {"all", all(), "1,2",
       {{"added", {"3", "", ""}},
        {"removed", {"", "2", ""}},
        {"corrupt", {"", "", ""}},
        {"corrupt, load call", {"3", "", ""}},
        {"corrupt, then rewritten", {"3", "", ""}},
        {"half-copied", {"", "", "3"}},
        {"relabelled", {"", "", ""}}}},
  };
  for (const auto& row : rows) {
    for (const auto& change : changes) {
      for (const bool availability : {true, false}) {
        SCOPED_TRACE(std::string(row.policy_name) + ", " + change.name + (availability ? ", availability" : ", resource"));
        Policy policy = row.policy;
        policy.labels = change.labels;
        const ModelDir model{"m", "/repo/m", policy, change.disk};
        const VersionPlan p = plan_versions({&model, list(row.served), {}, change.failed, change.asked, availability});
        const Expected& want = row.by_change.at(change.name);
        EXPECT_EQ(p.load, list(want.load));
        EXPECT_EQ(p.retire, list(want.retire));
        std::vector<std::string> unavailable;
        for (const auto& u : p.unavailable) {
          unavailable.push_back(u.version);
          EXPECT_EQ(u.reason, u.version == "3" && std::string(change.name) == "half-copied" ? kBeingWritten : kNotWanted);
        }
        EXPECT_EQ(unavailable, list(want.unavailable));
        // Resource: what goes, goes before anything loads (one version in memory).
        EXPECT_EQ(p.retire_first, !availability && !p.load.empty());
      }
    }
  }
}

TEST(VersionPlan, AvailabilityRetiresOnlyOnceAWantedVersionServes) {
  const ModelDir model{"m", "/repo/m", latest(1), {version("1"), version("2"), version("3")}};
  const VersionPlan p = plan_versions({&model, {"2"}, {}, {}, false, true});
  ASSERT_EQ(p.load, list("3"));
  EXPECT_EQ(retire_after_loads(p, list("2,3")), list("2"));  // 3 loaded: 2 goes
  EXPECT_EQ(retire_after_loads(p, list("2")), list(""));     // 3 failed: 2 keeps serving
  EXPECT_EQ(restore(p, list("2")), list(""));                // availability never retired it
}

TEST(VersionPlan, ResourceLoadsTheRetiredBackWhenNothingServes) {
  const ModelDir model{"m", "/repo/m", latest(1), {version("1"), version("2"), version("3")}};
  const VersionPlan p = plan_versions({&model, {"2"}, {}, {}, false, false});
  ASSERT_TRUE(p.retire_first);
  EXPECT_EQ(p.retire, list("2"));
  EXPECT_EQ(retire_after_loads(p, {}), list(""));  // already gone before the loads
  EXPECT_EQ(restore(p, {}), list("2"));            // 3 failed: 2 comes back
  EXPECT_EQ(restore(p, list("3")), list(""));
}

TEST(VersionPlan, NeverTheLastVersionServingAndTheHighestByNumberStays) {
  // Versions 9 and 10 serve; the policy now wants 11, which is not on disk.
  const ModelDir model{"m", "/repo/m", specific("11"), {version("9"), version("10")}};
  const VersionPlan p = plan_versions({&model, {"10", "9"}, {}, {}, false, true});
  EXPECT_EQ(p.retire, list("9,10"));  // by number, not as text
  EXPECT_EQ(retire_after_loads(p, list("9,10")), list("9"));
}

TEST(VersionPlan, VersionsGoneFromDiskLeaveTheIndexUnlessServingOrBeingUnloaded) {
  const ModelDir model{"m", "/repo/m", latest(1), {version("1")}};
  const std::map<std::string, VersionState> shown = {
      {"1", VersionState::kReady}, {"2", VersionState::kReady}, {"3", VersionState::kUnavailable}, {"4", VersionState::kUnloading}};
  const VersionPlan p = plan_versions({&model, {"1", "2"}, shown, {}, false, true});
  EXPECT_EQ(p.forget, list("3"));
}

TEST(VersionPlan, ARefusedPolicyChangesNothing) {
  const ModelDir model{"m", "/repo/m", tl::unexpected(Error{Error::Code::kInvalidArgument, "config.yaml line 1: ...", "version_policy"}),
                    {version("1"), version("2")}};
  const VersionPlan p = plan_versions({&model, {"1"}, {}, {}, false, true});
  EXPECT_TRUE(p.load.empty());
  EXPECT_TRUE(p.retire.empty());
  EXPECT_TRUE(p.unavailable.empty());
}

TEST(VersionPlan, StateNamesAreTritonsRepositoryWords) {
  EXPECT_EQ(state_name(VersionState::kLoading), "LOADING");
  EXPECT_EQ(state_name(VersionState::kReady), "READY");
  EXPECT_EQ(state_name(VersionState::kUnloading), "UNLOADING");
  EXPECT_EQ(state_name(VersionState::kUnavailable), "UNAVAILABLE");
}

}  // namespace
}  // namespace numaserve::lifecycle
