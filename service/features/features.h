#pragma once
// Feature values as requests and the feature store carry them: a number, a
// string id, or a list of string ids (a multi-valued feature). Integer ids are
// turned into their decimal text before hashing, so 42 and "42" are the same
// id — the hash contract in model_spec.h relies on it.

#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace numaserve::features {

using FeatureValue = std::variant<double, std::string, std::vector<std::string>>;
using Features = std::map<std::string, FeatureValue, std::less<>>;
// Visits stored entities one by one (an in-memory store lists its items so
// a model can extract each once at start).
using EntityVisitor = std::function<void(const std::string& id, const Features& features)>;

// An entity of a request or of the store: a user, an item.
struct Entity {
  std::string id;
  Features features;  // inline features override the store's
};

}  // namespace numaserve::features
