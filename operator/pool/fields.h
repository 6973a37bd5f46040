#pragma once
// Fields of the documents the API server sends, read without trusting their
// shape: a field of another type than expected, or a step missing, is null,
// "" or 0, never a throw (nlohmann's checked accessors would be one).

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace numaserve::op::pool {

// A field by its path, or null when a step is missing or not an object.
const nlohmann::json& field(const nlohmann::json& j, std::initializer_list<std::string_view> path);
// The same, "" unless a string; 0 unless an integer.
std::string text_field(const nlohmann::json& j, std::initializer_list<std::string_view> path);
std::int64_t integer_field(const nlohmann::json& j, std::initializer_list<std::string_view> path);

}  // namespace numaserve::op::pool
