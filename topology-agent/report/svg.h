#pragma once
// A picture of the node: packages, NUMA nodes with their memory, cores with
// their SMT siblings, the CPUs reserved for the system, and the replica slots
// of the plan — because people would rather look at a layout than read a
// cpulist. Plain SVG 1.1, no scripts, no external resources.

#include <optional>
#include <string>

#include "discover/discover.h"
#include "plan/plan.h"

namespace numaserve::agent::report {

std::string render_svg(const discover::NodeReport& report, const std::optional<plan::NodePlan>& plan);

}  // namespace numaserve::agent::report
