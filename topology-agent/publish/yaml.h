#pragma once
// JSON values as YAML, for `--output yaml|nrt` and files kubectl reads.

#include <string>

#include <nlohmann/json.hpp>

namespace numaserve::agent::publish {

// Block-style YAML; every string is double-quoted, so "true", "10" or "0-3"
// stay strings whatever the reader's YAML version.
std::string to_yaml(const nlohmann::json& value);

}  // namespace numaserve::agent::publish
