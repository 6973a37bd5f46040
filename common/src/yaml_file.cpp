#include "numaserve/common/yaml_file.h"

namespace numaserve {

Result<YAML::Node> parse_yaml(const std::string& text, const std::string& file) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return make_error(Error::Code::kInvalidArgument, file + " line " + std::to_string(e.mark.line + 1) + ": " + e.msg,
                      file);
  }
}

std::string yaml_location(const std::string& file, const YAML::Node& node) {
  return file + " line " + std::to_string(node.Mark().line + 1);
}

Result<std::string> yaml_key(const std::string& file, const YAML::Node& key) {
  if (key.IsSequence() || key.IsMap()) {
    return make_error(Error::Code::kInvalidArgument,
                      yaml_location(file, key) + ": a key must be a name, not a list or a map", file);
  }
  return key.as<std::string>();
}

std::optional<std::string> yaml_text(const YAML::Node& node) {
  if (!node || !node.IsScalar()) return std::nullopt;
  return node.Scalar();
}

}  // namespace numaserve
