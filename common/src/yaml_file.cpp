#include "numaserve/common/yaml_file.h"

#include <yaml-cpp/yaml.h>

namespace numaserve {

struct YamlNode::Impl {
  YAML::Node node;
};

YamlNode::YamlNode() = default;
YamlNode::YamlNode(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

namespace {

template <typename T>
std::optional<T> read_as(const YAML::Node& node) {
  try {
    if (node.IsScalar()) return node.as<T>();
  } catch (const YAML::Exception&) {
  }
  return std::nullopt;
}

}  // namespace

YamlNode::operator bool() const { return impl_ && impl_->node.IsDefined(); }
bool YamlNode::is_null() const { return *this && impl_->node.IsNull(); }
bool YamlNode::is_scalar() const { return *this && impl_->node.IsScalar(); }
bool YamlNode::is_sequence() const { return *this && impl_->node.IsSequence(); }
bool YamlNode::is_map() const { return *this && impl_->node.IsMap(); }

std::size_t YamlNode::size() const { return is_sequence() || is_map() ? impl_->node.size() : 0; }

YamlNode YamlNode::operator[](std::string_view key) const {
  if (!is_map()) return {};
  const YAML::Node& map = impl_->node;
  YAML::Node value = map[std::string(key)];
  if (!value.IsDefined()) return {};
  return YamlNode(std::make_shared<const Impl>(Impl{value}));
}

YamlNode YamlNode::operator[](std::size_t index) const {
  if (!is_sequence() || index >= size()) return {};
  const YAML::Node& sequence = impl_->node;
  return YamlNode(std::make_shared<const Impl>(Impl{sequence[index]}));
}

std::vector<std::pair<YamlNode, YamlNode>> YamlNode::entries() const {
  std::vector<std::pair<YamlNode, YamlNode>> out;
  if (!is_map()) return out;
  for (const auto& entry : impl_->node) {
    out.emplace_back(YamlNode(std::make_shared<const Impl>(Impl{entry.first})),
                     YamlNode(std::make_shared<const Impl>(Impl{entry.second})));
  }
  return out;
}

std::vector<YamlNode> YamlNode::items() const {
  std::vector<YamlNode> out;
  if (!is_sequence()) return out;
  for (const auto& item : impl_->node) out.push_back(YamlNode(std::make_shared<const Impl>(Impl{item})));
  return out;
}

std::optional<std::string> YamlNode::text() const {
  if (!is_scalar()) return std::nullopt;
  return impl_->node.Scalar();
}

std::optional<double> YamlNode::number() const { return *this ? read_as<double>(impl_->node) : std::nullopt; }

std::optional<std::uint64_t> YamlNode::whole_number() const {
  return *this ? read_as<std::uint64_t>(impl_->node) : std::nullopt;
}

int YamlNode::line() const { return impl_ ? impl_->node.Mark().line + 1 : 0; }

Result<YamlNode> parse_yaml(const std::string& text, const std::string& file) {
  try {
    return YamlNode(std::make_shared<const YamlNode::Impl>(YamlNode::Impl{YAML::Load(text)}));
  } catch (const YAML::Exception& e) {
    return make_error(Error::Code::kInvalidArgument, file + " line " + std::to_string(e.mark.line + 1) + ": " + e.msg,
                      file);
  }
}

std::string yaml_location(const std::string& file, const YamlNode& node) {
  return file + " line " + std::to_string(node.line());
}

Result<std::string> yaml_key(const std::string& file, const YamlNode& key) {
  if (key.is_sequence() || key.is_map()) {
    return make_error(Error::Code::kInvalidArgument,
                      yaml_location(file, key) + ": a key must be a name, not a list or a map", file);
  }
  return key.text().value_or("");
}

}  // namespace numaserve
