#pragma once
// Prometheus text exposition (format 0.0.4), written one family at a time:
// a HELP and TYPE header, then its samples. The one writer of /metrics text
// for both binaries, so label escaping and number formatting agree.

#include <concepts>
#include <string>
#include <string_view>

namespace numaserve::prometheus {

// A label value escaped as the format asks (backslash, quote, newline).
std::string escape(std::string_view value);
// `key="value"`, the value escaped.
std::string label(std::string_view key, std::string_view value);

class TextWriter {
 public:
  explicit TextWriter(std::string& out) : out_(out) {}

  TextWriter& family(std::string_view name, std::string_view type, std::string_view help);
  // `labels` is the inside of the braces: `a="1",b="2"`; empty for none.
  // Doubles as %.9g; integers exactly, however large.
  TextWriter& sample(std::string_view name, double value, std::string_view labels = {});
  template <std::integral T>
  TextWriter& sample(std::string_view name, T value, std::string_view labels = {}) {
    return sample_text(name, std::to_string(value), labels);
  }
  // A family of one unlabelled sample, the commonest kind: its name once.
  template <class T>
  TextWriter& single(std::string_view name, std::string_view type, std::string_view help, T value) {
    return family(name, type, help).sample(name, value);
  }

 private:
  TextWriter& sample_text(std::string_view name, const std::string& value, std::string_view labels);
  std::string& out_;
};

// %.9g: what sample() writes for a double, and a histogram's `le` bound.
std::string number(double value);

}  // namespace numaserve::prometheus
