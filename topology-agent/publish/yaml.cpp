#include "publish/yaml.h"

#include <yaml-cpp/yaml.h>

namespace numaserve::agent::publish {
namespace {

void emit(YAML::Emitter& out, const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case nlohmann::json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : value) emit(out, item);
      out << YAML::EndSeq;
      break;
    case nlohmann::json::value_t::string:
      out << YAML::DoubleQuoted << value.get<std::string>();
      break;
    case nlohmann::json::value_t::null:
      out << YAML::Null;
      break;
    default:  // numbers and booleans print the same in both
      out << value.dump();
      break;
  }
}

}  // namespace

std::string to_yaml(const nlohmann::json& value) {
  YAML::Emitter out;
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

}  // namespace numaserve::agent::publish
