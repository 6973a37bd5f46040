#pragma once
// YAML input (config files, model.yaml, the kubelet's configuration) with
// errors that say where: "model.yaml line 7: ...". yaml-cpp exceptions stop
// here; callers get Result and nodes.

#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "numaserve/common/result.h"

namespace numaserve {

Result<YAML::Node> parse_yaml(const std::string& text, const std::string& file);

// "file line N" for a node (1-based), to start an error message with.
std::string yaml_location(const std::string& file, const YAML::Node& node);

// A mapping key's text. YAML lets a key be a list or a map ("? [a]: b"),
// which yaml-cpp throws on when read as text; no numaserve file has one, so
// it is refused, naming the line.
Result<std::string> yaml_key(const std::string& file, const YAML::Node& key);

// A scalar's text; nothing for an absent or null node, a list or a map.
std::optional<std::string> yaml_text(const YAML::Node& node);

}  // namespace numaserve
