#pragma once
// Every form the agent renders a node in, declared once: the name `plan -o`
// takes, the hint file the updater writes it to, and whether it needs a
// plan. The updater writes each rendering with a file; without a plan it
// removes the plan's files, so that no reader takes an old plan for this
// machine's.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "discover/discover.h"
#include "plan/plan.h"
#include "publish/fingerprint.h"

namespace numaserve::agent::publish {

struct RenderInput {
  const discover::NodeReport& report;
  const std::optional<plan::NodePlan>& plan;  // a rendering that needs a plan is only called with one
  std::string node_name;
  FingerprintMethod fingerprint_method = FingerprintMethod::kWithExclusiveResources;
};

struct Rendering {
  std::string_view name;       // plan -o NAME
  std::string_view hint_file;  // written in the hints directory; empty: printed only
  bool needs_plan = true;
  std::string (*render)(const RenderInput& input) = nullptr;
};

const std::vector<Rendering>& renderings();
const Rendering* find_rendering(std::string_view name);  // nullptr: no such name

}  // namespace numaserve::agent::publish
