#include "pool/fields.h"

namespace numaserve::op::pool {

using nlohmann::json;

const json& field(const json& j, std::initializer_list<std::string_view> path) {
  static const json null;
  const json* at = &j;
  for (const auto key : path) {
    if (!at->is_object()) return null;
    const auto it = at->find(key);
    if (it == at->end()) return null;
    at = &*it;
  }
  return *at;
}

std::string text_field(const json& j, std::initializer_list<std::string_view> path) {
  const json& v = field(j, path);
  return v.is_string() ? v.get<std::string>() : "";
}

std::int64_t integer_field(const json& j, std::initializer_list<std::string_view> path) {
  const json& v = field(j, path);
  return v.is_number_integer() ? v.get<std::int64_t>() : 0;
}

}  // namespace numaserve::op::pool
