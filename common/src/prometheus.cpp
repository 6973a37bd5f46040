#include "numaserve/common/prometheus.h"

#include <cstdio>

namespace numaserve::prometheus {

std::string escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

std::string label(std::string_view key, std::string_view value) {
  return std::string(key) + "=\"" + escape(value) + "\"";
}

std::string number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  return buf;
}

TextWriter& TextWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  out_.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ");
  out_.append(type).append("\n");
  return *this;
}

TextWriter& TextWriter::sample(std::string_view name, double value, std::string_view labels) {
  return sample_text(name, number(value), labels);
}

TextWriter& TextWriter::sample_text(std::string_view name, const std::string& value, std::string_view labels) {
  out_.append(name);
  if (!labels.empty()) out_.append("{").append(labels).append("}");
  out_.append(" ").append(value).append("\n");
  return *this;
}

}  // namespace numaserve::prometheus
