#pragma once
// YAML input (config files, model.yaml, the kubelet's configuration) with
// errors that say where: "model.yaml line 7: ...". yaml-cpp stays inside
// yaml_file.cpp: callers get Result and YamlNode, a read-only view of one
// node, and no yaml-cpp exception reaches them.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve {

class YamlNode {
 public:
  YamlNode();  // absent: what a missing key gives

  explicit operator bool() const;  // present (a null value is present)
  bool is_null() const;
  bool is_scalar() const;
  bool is_sequence() const;
  bool is_map() const;

  std::size_t size() const;  // items of a sequence, entries of a map; else 0
  // A map's value for `key`, a sequence's item; absent when there is none.
  YamlNode operator[](std::string_view key) const;
  YamlNode operator[](std::size_t index) const;
  std::vector<std::pair<YamlNode, YamlNode>> entries() const;  // a map's, in file order
  std::vector<YamlNode> items() const;                         // a sequence's

  std::optional<std::string> text() const;  // a scalar's text; nothing otherwise
  // A scalar read as YAML reads numbers ("1e3", ".inf"); nothing if it is not one.
  std::optional<double> number() const;
  std::optional<std::uint64_t> whole_number() const;
  int line() const;  // 1-based; 0 for an absent node

 private:
  struct Impl;
  explicit YamlNode(std::shared_ptr<const Impl> impl);
  friend Result<YamlNode> parse_yaml(const std::string& text, const std::string& file);
  std::shared_ptr<const Impl> impl_;
};

Result<YamlNode> parse_yaml(const std::string& text, const std::string& file);

// "file line N" for a node, to start an error message with.
std::string yaml_location(const std::string& file, const YamlNode& node);

// A mapping key's text. YAML lets a key be a list or a map ("? [a]: b");
// no numaserve file has one, so it is refused, naming the line.
Result<std::string> yaml_key(const std::string& file, const YamlNode& key);

}  // namespace numaserve
