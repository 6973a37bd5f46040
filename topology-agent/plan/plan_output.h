#pragma once
// The plan in the forms people use it: JSON (the agent's /plan and plan.json),
// a KubeletConfiguration drop-in, Helm values for the service chart, and text.

#include <string>

#include <nlohmann/json.hpp>

#include "plan/plan.h"

namespace numaserve::agent::plan {

void to_json(nlohmann::json& j, const NodePlan& plan);

// kubelet.config.k8s.io/v1beta1 KubeletConfiguration with the CPU, Memory
// and Topology Manager settings and the reservations. Valid as a drop-in
// (--config-dir) or merged into the main config file.
std::string kubelet_config_yaml(const NodePlan& plan);

// Values for charts/numaserve: resources (requests = limits) and replicasPerMachine.
std::string helm_values_yaml(const NodePlan& plan);

std::string render_text(const NodePlan& plan);

}  // namespace numaserve::agent::plan
