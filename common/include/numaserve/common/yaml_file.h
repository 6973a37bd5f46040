#pragma once
// YAML input (config files, model.yaml, the kubelet's configuration) with
// errors that say where: "model.yaml line 7: ...". yaml-cpp exceptions stop
// here; callers get Result and nodes.

#include <string>

#include <yaml-cpp/yaml.h>

#include "numaserve/common/result.h"

namespace numaserve {

Result<YAML::Node> parse_yaml(const std::string& text, const std::string& file);

// "file line N" for a node (1-based), to start an error message with.
std::string yaml_location(const std::string& file, const YAML::Node& node);

}  // namespace numaserve
