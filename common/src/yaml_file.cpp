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

}  // namespace numaserve
