#include "numaserve/common/log.h"

#include <algorithm>
#include <ctime>
#include <iostream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "numaserve/common/names.h"

namespace numaserve {
namespace {

struct Logger {
  std::mutex mutex;
  std::string component = "numaserve";
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kText;
};

Logger& logger() {
  static Logger instance;
  return instance;
}

constexpr auto kLevelNames = make_names<LogLevel>(
    {{LogLevel::kDebug, "debug"}, {LogLevel::kInfo, "info"}, {LogLevel::kWarning, "warning"}, {LogLevel::kError, "error"}});
constexpr auto kFormatNames = make_names<LogFormat>({{LogFormat::kText, "text"}, {LogFormat::kJson, "json"}});

// logfmt: a value is quoted (JSON string escapes) when it is empty or holds a
// space, a quote, an equals sign, a backslash, a control character or a
// non-ASCII byte, so a reader never splits it into keys and a newline in it
// cannot forge a line.
std::string text_value(const std::string& value) {
  const bool plain = !value.empty() && std::none_of(value.begin(), value.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte <= ' ' || byte >= 0x7f || c == '"' || c == '=' || c == '\\';
  });
  // Bytes that are not UTF-8 (a client's path, a file name) become U+FFFD
  // rather than an exception out of the logger.
  return plain ? value : nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

Result<LogLevel> parse_log_level(std::string_view text) {
  if (const auto level = kLevelNames.parse(text)) return *level;
  return make_error(Error::Code::kInvalidArgument,
                    "log level '" + std::string(text) + "': want " + kLevelNames.choices(), "log_level");
}

std::string_view to_string(LogLevel level) { return kLevelNames.name(level); }

std::string_view to_string(LogFormat format) { return kFormatNames.name(format); }

Result<LogFormat> parse_log_format(std::string_view text) {
  if (const auto format = kFormatNames.parse(text)) return *format;
  return make_error(Error::Code::kInvalidArgument,
                    "log format '" + std::string(text) + "': want " + kFormatNames.choices(), "log_format");
}

void configure_logging(std::string component, LogLevel level, LogFormat format) {
  auto& l = logger();
  std::lock_guard lock(l.mutex);
  l.component = std::move(component);
  l.level = level;
  l.format = format;
}

void log(LogLevel level, std::string_view message, const LogFields& fields) {
  auto& l = logger();
  std::lock_guard lock(l.mutex);
  if (level < l.level) return;
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string name(kLevelNames.name(level));
  if (l.format == LogFormat::kJson) {
    nlohmann::ordered_json line = {{"ts", stamp}, {"level", name}, {"component", l.component}, {"msg", message}};
    for (const auto& [key, value] : fields) line[key] = value;
    std::cerr << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  std::string line = std::string(stamp) + " level=" + name + " component=" + text_value(l.component) + " msg=" +
                     text_value(std::string(message));
  for (const auto& [key, value] : fields) line += " " + key + "=" + text_value(value);
  std::cerr << line << "\n";
}

}  // namespace numaserve
