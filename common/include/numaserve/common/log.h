#pragma once
// One log line per event on stderr, as key=value text for people or as
// JSON for log pipelines (--log-format json), with a level filter.
// Deliberately small: both binaries log a few lines at start, on signals and
// on errors, never per request (requests are counted in /metrics).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve {

enum class LogLevel { kDebug, kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };

Result<LogLevel> parse_log_level(std::string_view text);    // debug|info|warning|error
Result<LogFormat> parse_log_format(std::string_view text);  // text|json
std::string_view to_string(LogLevel level);
std::string_view to_string(LogFormat format);

void configure_logging(std::string component, LogLevel level, LogFormat format);

using LogFields = std::vector<std::pair<std::string, std::string>>;
void log(LogLevel level, std::string_view message, const LogFields& fields = {});

}  // namespace numaserve
