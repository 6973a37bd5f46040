#pragma once
// Whether a live object already is what the operator would apply, so that
// a pass over an unchanged fleet writes nothing.

#include <string>

#include <nlohmann/json.hpp>

namespace numaserve::op::pool {

// Whether `live` already holds every field of `desired` (what an apply of
// `desired` would set): objects by key, lists element by element, and
// empty maps, lists or nulls in `desired` match absent fields (the API
// server drops them). Fields the server or others added are not compared.
bool contains(const nlohmann::json& live, const nlohmann::json& desired);
// The first field where it does not, as a JSON pointer ("" when it does):
// what the operator logs as the reason it applies.
std::string first_difference(const nlohmann::json& live, const nlohmann::json& desired);

}  // namespace numaserve::op::pool
