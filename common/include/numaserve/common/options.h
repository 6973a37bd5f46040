#pragma once
// Options declared once, in a table: flag, NUMASERVE_* environment variable,
// YAML key, help text and default, and the one function that parses a value
// into the typed config struct. From the table come the command line, the
// environment, the YAML config file, --help and the README's option table,
// so the four can never disagree. Precedence: default < YAML < env < flag.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"
#include "numaserve/common/result.h"

namespace CLI {
class App;
}

namespace numaserve {

struct OptionSpec {
  std::string name;      // YAML key and the stem of flag and env: "hints_dir"
  std::string value;     // placeholder for help, "DIR"; empty for a switch (true/false)
  std::string help;
  std::string default_text;
  // Parses `text` into the config; the error names what is wrong with it.
  std::function<Status(const std::string& text)> set;
  // A list: the flag may repeat, YAML takes a sequence, the environment a
  // comma-separated list; `set` gets all values joined by commas, and a
  // later source replaces the list of an earlier one.
  bool repeatable = false;
  // Only a flag: no NUMASERVE_* variable, no YAML key. For a subcommand's
  // own switches (an output format, a file to draw into), which no
  // deployment sets and whose names would collide across subcommands.
  bool command_line_only = false;
  char short_flag = 0;  // also -x

  std::string flag() const;  // "--hints-dir"
  std::string env() const;   // "NUMASERVE_HINTS_DIR"
};

class OptionTable {
 public:
  explicit OptionTable(std::vector<OptionSpec> rows);

  const std::vector<OptionSpec>& rows() const { return rows_; }

  // Errors on two rows sharing a name (hence a flag, env var or key).
  Status check_unique() const;

  // Adds every row to a CLI11 (sub)command, plus --config FILE. Values seen
  // on the command line or in the environment are only recorded here;
  // apply() sets them after the YAML file, so the precedence holds.
  void add_to(CLI::App& app);

  // Applies the YAML config file (when --config or NUMASERVE_CONFIG named
  // one), then environment and flag values. Unknown YAML keys are errors
  // that name file and line.
  Status apply();

  // YAML text alone (for tests and for a mounted ConfigMap).
  Status apply_yaml(const std::string& yaml, const std::string& file);

  std::string markdown() const;  // the README's table

 private:
  bool configurable() const;  // some row has a YAML key and a variable: --config applies
  std::vector<OptionSpec> rows_;
  std::string config_file_;
  std::vector<std::pair<const OptionSpec*, std::string>> from_command_line_;
};

// Rows bound to a field of a config struct. The default shown is the
// field's value when the row is made: a table built on default-constructed
// configs shows the libraries' own defaults, so none is written twice.
OptionSpec text_option(std::string name, std::string value, std::string help, std::string& target);
OptionSpec path_option(std::string name, std::string value, std::string help, std::filesystem::path& target);
OptionSpec list_option(std::string name, std::string value, std::string help, std::vector<std::string>& target);
OptionSpec switch_option(std::string name, std::string help, bool& target);
OptionSpec number_option(std::string name, std::string value, std::string help, double& target);
// "8Mi", "1G", "4096"; shown as a quantity.
OptionSpec quantity_option(std::string name, std::string help, std::uint64_t& target);
// "30", "30s", "5m", "250ms", "1m30s"; shown as seconds.
OptionSpec seconds_option(std::string name, std::string help, double& seconds);
// A share: a number above 0 and at most 1.
OptionSpec share_option(std::string name, std::string help, double& target);
template <std::unsigned_integral T>
OptionSpec count_option(std::string name, std::string value, std::string help, T& target,
                        T max = std::numeric_limits<T>::max());
template <class Rep, class Period>
OptionSpec duration_option(std::string name, std::string help, std::chrono::duration<Rep, Period>& target);

// How defaults are shown: 60 -> "60s", 0.25 -> "250ms"; 0.9 -> "0.9".
std::string format_seconds(double seconds);
std::string format_number(double value);

// `row` without a shown default, for one that is this machine's or this
// environment's (a host name, a port from a variable): not the table's.
OptionSpec without_default(OptionSpec row);
// A subcommand's rows that are flags only (no variable, no YAML key, no
// --config): a one-shot command's, whose settings are not a deployment's.
std::vector<OptionSpec> command_line_only(std::vector<OptionSpec> rows);

// Value parsers for rows, each with an error naming the option.
Status set_string(std::string& target, const std::string& text);
// A comma-separated list; empty items are dropped.
Status set_list(std::vector<std::string>& target, const std::string& text);
Status set_unsigned(const std::string& name, const std::string& text, unsigned& target,
                    unsigned max = std::numeric_limits<unsigned>::max());
Status set_count(const std::string& name, const std::string& text, std::uint64_t& target, std::uint64_t max);
Status set_double(const std::string& name, const std::string& text, double& target);
Status set_bool(const std::string& name, const std::string& text, bool& target);
// A bare number of seconds, or Go's duration syntax as Kubernetes and the
// chart's schema write it: "30s", "5m", "250ms", "1m30s", "500us", "1.5h";
// at most kMaxSeconds, so that any duration converts to the clocks' integer
// ticks.
inline constexpr double kMaxSeconds = 1e9;
Status set_seconds(const std::string& name, const std::string& text, double& target);
// A Kubernetes quantity of bytes: "8Mi", "1G", "4096".
Status set_quantity(const std::string& name, const std::string& text, std::uint64_t& target);

// The log's settings, the same rows in both binaries' tables.
struct LogOptions {
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kText;
};
std::vector<OptionSpec> log_options(LogOptions& o);  // log_level, log_format

template <std::unsigned_integral T>
OptionSpec count_option(std::string name, std::string value, std::string help, T& target, T max) {
  std::string shown = std::to_string(target);
  return {name, std::move(value), std::move(help), std::move(shown), [name, &target, max](const std::string& text) {
            std::uint64_t parsed = 0;
            auto set = set_count(name, text, parsed, max);
            if (set) target = static_cast<T>(parsed);
            return set;
          }};
}

template <class Rep, class Period>
OptionSpec duration_option(std::string name, std::string help, std::chrono::duration<Rep, Period>& target) {
  std::string shown = format_seconds(to_seconds(target));
  return {name, "DURATION", std::move(help), std::move(shown), [name, &target](const std::string& text) {
            double seconds = 0;
            auto set = set_seconds(name, text, seconds);
            if (set) target = to_duration<std::chrono::duration<Rep, Period>>(seconds);
            return set;
          }};
}

}  // namespace numaserve
