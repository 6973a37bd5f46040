#include "pool/compare.h"

namespace numaserve::op::pool {
namespace {

using nlohmann::json;

bool empty_value(const json& v) { return v.is_null() || ((v.is_object() || v.is_array()) && v.empty()); }

// "/" (the value itself differs) or a pointer below `here`.
std::string below(const std::string& here, const std::string& deeper) { return here + (deeper == "/" ? "" : deeper); }

}  // namespace

std::string first_difference(const json& live, const json& desired) {
  if (empty_value(desired)) return live.is_null() || empty_value(live) || live == desired ? "" : "/";
  if (desired.is_object()) {
    if (!live.is_object()) return "/";
    for (const auto& [k, v] : desired.items()) {
      if (!live.contains(k)) {
        if (!empty_value(v)) return "/" + k;
        continue;
      }
      if (std::string deeper = first_difference(live[k], v); !deeper.empty()) return below("/" + k, deeper);
    }
    return "";
  }
  if (desired.is_array()) {
    if (!live.is_array() || live.size() != desired.size()) return "/";
    for (std::size_t i = 0; i < desired.size(); ++i) {
      if (std::string deeper = first_difference(live[i], desired[i]); !deeper.empty()) {
        return below("/" + std::to_string(i), deeper);
      }
    }
    return "";
  }
  // The API server writes integers back as integers; a number we send as a
  // float (0.9) stays one. Compare numbers by value.
  if (desired.is_number() && live.is_number()) return desired.get<double>() == live.get<double>() ? "" : "/";
  return live == desired ? "" : "/";
}

bool contains(const json& live, const json& desired) { return first_difference(live, desired).empty(); }

}  // namespace numaserve::op::pool
