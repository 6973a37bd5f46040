#include "http/predict_json.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace numaserve::http {
namespace {

using nlohmann::json;

tl::unexpected<Error> bad(const std::string& field, const std::string& message) {
  return make_error(Error::Code::kInvalidArgument, field + ": " + message, field);
}

Result<std::string> id_of(const json& value, const std::string& field) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer() || value.is_number_unsigned()) return value.dump();
  return bad(field, "want a string or an integer id");
}

Result<features::FeatureValue> feature_value(const json& value, const std::string& field,
                                             const RequestLimits& limits) {
  if (value.is_number()) {
    const double x = value.get<double>();
    if (!std::isfinite(x)) return bad(field, "want a finite number");
    return features::FeatureValue(x);
  }
  if (value.is_string()) return features::FeatureValue(value.get<std::string>());
  if (value.is_array()) {
    if (value.size() > limits.max_list_length) {
      return bad(field, "list of " + std::to_string(value.size()) + " ids; the limit is " +
                            std::to_string(limits.max_list_length));
    }
    std::vector<std::string> ids;
    ids.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
      auto id = id_of(value[i], field + "[" + std::to_string(i) + "]");
      if (!id) return tl::unexpected(id.error());
      ids.push_back(std::move(*id));
    }
    return features::FeatureValue(std::move(ids));
  }
  return bad(field, "want a number, a string or a list of ids");
}

Result<features::Features> feature_map(const json& value, const std::string& field, const RequestLimits& limits) {
  if (!value.is_object()) return bad(field, "want an object of feature values");
  if (value.size() > limits.max_features_per_entity) {
    return bad(field, std::to_string(value.size()) + " features; the limit is " +
                          std::to_string(limits.max_features_per_entity));
  }
  features::Features out;
  for (const auto& [name, v] : value.items()) {
    auto converted = feature_value(v, field + "." + name, limits);
    if (!converted) return tl::unexpected(converted.error());
    out.emplace(name, std::move(*converted));
  }
  return out;
}

Result<features::Entity> entity(const json& value, const std::string& field, const RequestLimits& limits,
                                bool id_required) {
  if (!value.is_object()) return bad(field, "want an object with an id");
  for (const auto& [key, v] : value.items()) {
    if (key != "id" && key != "features") return bad(field + "." + key, "unknown field");
  }
  features::Entity out;
  if (value.contains("id")) {
    auto id = id_of(value["id"], field + ".id");
    if (!id) return tl::unexpected(id.error());
    out.id = std::move(*id);
  } else if (id_required) {
    return bad(field + ".id", "required");
  }
  if (value.contains("features")) {
    auto f = feature_map(value["features"], field + ".features", limits);
    if (!f) return tl::unexpected(f.error());
    out.features = std::move(*f);
  }
  return out;
}

}  // namespace

Result<PredictRequest> parse_predict_request(std::string_view body, const RequestLimits& limits) {
  // nlohmann parses and destroys without recursion, so deep nesting costs
  // memory bounded by the body limit, not stack; the shape checks below
  // reject anything nested deeper than a list of ids.
  const json root = json::parse(body, nullptr, false);
  if (root.is_discarded()) return bad("body", "not valid JSON");
  if (!root.is_object()) return bad("body", "want a JSON object");
  for (const auto& [key, v] : root.items()) {
    if (key != "model" && key != "request_id" && key != "user" && key != "context" && key != "items") {
      return bad(key, "unknown field");
    }
  }
  PredictRequest out;
  if (root.contains("model")) {
    if (!root["model"].is_string()) return bad("model", "want a string");
    out.model = root["model"].get<std::string>();
  }
  if (root.contains("request_id")) {
    auto id = id_of(root["request_id"], "request_id");
    if (!id) return tl::unexpected(id.error());
    out.request_id = std::move(*id);
  }
  if (!root.contains("user")) return bad("user", "required");
  auto user = entity(root["user"], "user", limits, false);
  if (!user) return tl::unexpected(user.error());
  out.features.user = std::move(*user);
  if (root.contains("context")) {
    auto context = feature_map(root["context"], "context", limits);
    if (!context) return tl::unexpected(context.error());
    out.features.context = std::move(*context);
  }
  if (!root.contains("items") || !root["items"].is_array()) return bad("items", "required: a list of items");
  const json& items = root["items"];
  if (items.empty()) return bad("items", "empty: send at least one item");
  if (items.size() > limits.max_items) {
    return bad("items", std::to_string(items.size()) + " items; the limit is " + std::to_string(limits.max_items));
  }
  out.features.items.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto item = entity(items[i], "items[" + std::to_string(i) + "]", limits, true);
    if (!item) return tl::unexpected(item.error());
    out.features.items.push_back(std::move(*item));
  }
  return out;
}

std::string to_json(const PredictResponse& response) {
  return json{{"model", response.model},
              {"version", response.version},
              {"request_id", response.request_id},
              {"scores", response.scores}}
      .dump();
}

std::string error_json(const Error& error) {
  json body = {{"error", error.message}};
  if (!error.field.empty()) body["field"] = error.field;
  return body.dump();
}

}  // namespace numaserve::http
