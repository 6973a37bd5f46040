#include "numaserve/common/options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>

#include "numaserve/common/quantity.h"
#include "numaserve/common/text_file.h"
#include "numaserve/common/yaml_file.h"

namespace numaserve {
namespace {

Error bad_value(const std::string& name, const std::string& text, const std::string& want) {
  return Error{Error::Code::kInvalidArgument, name + ": '" + text + "' is not " + want, name};
}

}  // namespace

std::string OptionSpec::flag() const {
  std::string out = "--" + name;
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

std::string OptionSpec::env() const {
  std::string out = "NUMASERVE_" + name;
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

OptionTable::OptionTable(std::vector<OptionSpec> rows) : rows_(std::move(rows)) {}

Status OptionTable::check_unique() const {
  std::set<std::string> seen;
  for (const auto& row : rows_) {
    if (row.name == "config") {
      return make_error(Error::Code::kInternal, "option name 'config' is reserved for the config file", row.name);
    }
    if (!seen.insert(row.name).second) {
      return make_error(Error::Code::kInternal, "option '" + row.name + "' is declared twice", row.name);
    }
  }
  return {};
}

bool OptionTable::configurable() const {
  return std::any_of(rows_.begin(), rows_.end(), [](const OptionSpec& row) { return !row.command_line_only; });
}

void OptionTable::add_to(CLI::App& app) {
  if (configurable()) {
    app.add_option("--config", config_file_, "YAML file with any of the options below (keys as in the table)")
        ->envname("NUMASERVE_CONFIG")
        ->check(CLI::ExistingFile);
  }
  for (const auto& row : rows_) {
    const OptionSpec* spec = &row;
    const std::string help = row.help + (row.default_text.empty() ? "" : " (default " + row.default_text + ")");
    const std::string names = row.flag() + (row.short_flag != 0 ? std::string(",-") + row.short_flag : "");
    CLI::Option* option = nullptr;
    if (row.value.empty()) {
      option = app.add_flag_function(
          names,
          [this, spec](std::int64_t count) { from_command_line_.emplace_back(spec, count > 0 ? "true" : "false"); },
          help);
    } else if (row.repeatable) {
      option = app.add_option_function<std::vector<std::string>>(
                     names,
                     [this, spec](const std::vector<std::string>& values) {
                       std::string joined;
                       for (const auto& v : values) joined += (joined.empty() ? "" : ",") + v;
                       from_command_line_.emplace_back(spec, joined);
                     },
                     help)
                   ->type_name(row.value);
    } else {
      option = app.add_option_function<std::string>(
                     names, [this, spec](const std::string& text) { from_command_line_.emplace_back(spec, text); }, help)
                   ->type_name(row.value);
    }
    if (!row.command_line_only) option->envname(row.env());
  }
}

Status OptionTable::apply() {
  if (!config_file_.empty()) {
    auto text = read_text_file(config_file_);
    if (!text) return tl::unexpected(text.error());
    if (auto applied = apply_yaml(*text, config_file_); !applied) return applied;
  }
  for (const auto& [spec, text] : from_command_line_) {
    if (auto applied = spec->set(text); !applied) {
      return tl::unexpected(std::move(applied.error()).with_context(spec->flag() + " / " + spec->env()));
    }
  }
  return {};
}

Status OptionTable::apply_yaml(const std::string& yaml, const std::string& file) {
  auto parsed = parse_yaml(yaml, file);
  if (!parsed) return tl::unexpected(parsed.error());
  const YamlNode& root = *parsed;
  if (root.is_null()) return {};
  if (!root.is_map()) return make_error(Error::Code::kInvalidArgument, file + ": want a map of options", file);
  for (const auto& entry : root.entries()) {
    auto name = yaml_key(file, entry.first);
    if (!name) return tl::unexpected(name.error());
    const std::string& key = *name;
    const std::string where = yaml_location(file, entry.first);
    const auto row = std::find_if(rows_.begin(), rows_.end(),
                                  [&](const OptionSpec& r) { return r.name == key && !r.command_line_only; });
    if (row == rows_.end()) {
      return make_error(Error::Code::kInvalidArgument, where + ": unknown option '" + key + "'", key);
    }
    std::string value;
    if (row->repeatable && entry.second.is_sequence()) {
      for (const auto& item : entry.second.items()) {
        if (!item.is_scalar()) {
          return make_error(Error::Code::kInvalidArgument, where + ": " + key + " wants a list of values", key);
        }
        value += (value.empty() ? "" : ",") + item.text().value_or("");
      }
    } else if (entry.second.is_scalar()) {
      value = entry.second.text().value_or("");
    } else {
      return make_error(Error::Code::kInvalidArgument, where + ": " + key + " wants a single value", key);
    }
    if (auto applied = row->set(value); !applied) {
      return tl::unexpected(std::move(applied.error()).with_context(where));
    }
  }
  return {};
}

std::string OptionTable::markdown() const {
  std::ostringstream out;
  out << "| flag | environment | YAML key | default | meaning |\n|---|---|---|---|---|\n";
  if (configurable()) {
    out << "| `--config FILE` | `NUMASERVE_CONFIG` | — | — | YAML file with any of the options below |\n";
  }
  for (const auto& row : rows_) {
    out << "| `" << row.flag() << (row.short_flag != 0 ? std::string(", -") + row.short_flag : "")
        << (row.value.empty() ? "" : " " + row.value) << "` | "
        << (row.command_line_only ? "— | —" : "`" + row.env() + "` | `" + row.name + "`") << " | "
        << (row.default_text.empty() ? "—" : "`" + row.default_text + "`") << " | " << row.help
        << (row.repeatable ? " (repeatable)" : "") << " |\n";
  }
  return out.str();
}

Status set_string(std::string& target, const std::string& text) {
  target = text;
  return {};
}

Status set_list(std::vector<std::string>& target, const std::string& text) {
  target.clear();
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) target.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {};
}

Status set_count(const std::string& name, const std::string& text, std::uint64_t& target, std::uint64_t max) {
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return tl::unexpected(bad_value(name, text, "a whole number"));
  }
  if (value > max) return tl::unexpected(bad_value(name, text, "a whole number up to " + std::to_string(max)));
  target = value;
  return {};
}

Status set_unsigned(const std::string& name, const std::string& text, unsigned& target, unsigned max) {
  std::uint64_t value = 0;
  if (auto set = set_count(name, text, value, max); !set) return set;
  target = static_cast<unsigned>(value);
  return {};
}

Status set_quantity(const std::string& name, const std::string& text, std::uint64_t& target) {
  auto bytes = parse_quantity(text);
  if (!bytes) return tl::unexpected(std::move(bytes.error()).with_context(name));
  target = *bytes;
  return {};
}

Status set_double(const std::string& name, const std::string& text, double& target) {
  std::istringstream in(text);
  double value = 0;
  if (!(in >> value) || !in.eof() || !std::isfinite(value)) return tl::unexpected(bad_value(name, text, "a number"));
  target = value;
  return {};
}

Status set_bool(const std::string& name, const std::string& text, bool& target) {
  if (text == "true" || text == "1" || text == "yes") {
    target = true;
  } else if (text == "false" || text == "0" || text == "no") {
    target = false;
  } else {
    return tl::unexpected(bad_value(name, text, "true or false"));
  }
  return {};
}

Status set_seconds(const std::string& name, const std::string& text, double& target) {
  const auto refuse = [&] {
    return Status(tl::unexpected(bad_value(name, text, "a duration (30, 30s, 5m, 250ms, 1m30s) up to 1e9 s")));
  };
  // A bare number is seconds.
  if (double plain = 0; set_double(name, text, plain)) {
    if (plain < 0 || plain > kMaxSeconds) return refuse();
    target = plain;
    return {};
  }
  // Else one or more <number><unit>, as Go's time.ParseDuration reads them
  // (without a sign: no setting here is negative).
  static const std::pair<std::string_view, double> kUnits[] = {
      {"ns", 1e-9}, {"us", 1e-6}, {"\u00b5s", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
  double total = 0;
  std::string_view rest = text;
  if (rest.empty()) return refuse();
  while (!rest.empty()) {
    std::size_t digits = 0;
    while (digits < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[digits])) || rest[digits] == '.')) {
      ++digits;
    }
    double value = 0;
    if (digits == 0 || !set_double(name, std::string(rest.substr(0, digits)), value)) return refuse();
    rest.remove_prefix(digits);
    // "ms" is listed before "m", so it is the one a "ms" suffix finds.
    const auto unit =
        std::find_if(std::begin(kUnits), std::end(kUnits), [&](const auto& u) { return rest.starts_with(u.first); });
    if (unit == std::end(kUnits)) return refuse();
    rest.remove_prefix(unit->first.size());
    total += value * unit->second;
  }
  if (total > kMaxSeconds) return refuse();
  target = total;
  return {};
}

std::string format_seconds(double seconds) {
  const auto whole = [](double v) { return std::abs(v - std::round(v)) < 1e-9 && std::abs(v) < 1e15; };
  std::ostringstream out;
  if (seconds == 0 || whole(seconds)) {
    out << static_cast<long long>(std::round(seconds)) << "s";
  } else if (whole(seconds * 1e3)) {
    out << static_cast<long long>(std::round(seconds * 1e3)) << "ms";
  } else {
    out << static_cast<long long>(std::round(seconds * 1e6)) << "us";
  }
  return out.str();
}

OptionSpec text_option(std::string name, std::string value, std::string help, std::string& target) {
  std::string shown = target;
  return {std::move(name), std::move(value), std::move(help), std::move(shown),
          [&target](const std::string& text) { return set_string(target, text); }};
}

OptionSpec path_option(std::string name, std::string value, std::string help, std::filesystem::path& target) {
  std::string shown = target.string();
  return {std::move(name), std::move(value), std::move(help), std::move(shown), [&target](const std::string& text) {
            target = text;
            return Status();
          }};
}

OptionSpec list_option(std::string name, std::string value, std::string help, std::vector<std::string>& target) {
  std::string shown;
  for (const auto& item : target) shown += (shown.empty() ? "" : ",") + item;
  OptionSpec row{std::move(name), std::move(value), std::move(help), std::move(shown),
                 [&target](const std::string& text) { return set_list(target, text); }};
  row.repeatable = true;
  return row;
}

OptionSpec switch_option(std::string name, std::string help, bool& target) {
  return {name, "", std::move(help), target ? "true" : "false",
          [name, &target](const std::string& text) { return set_bool(name, text, target); }};
}

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

OptionSpec without_default(OptionSpec row) {
  row.default_text.clear();
  return row;
}

std::vector<OptionSpec> command_line_only(std::vector<OptionSpec> rows) {
  for (auto& row : rows) row.command_line_only = true;
  return rows;
}

OptionSpec number_option(std::string name, std::string value, std::string help, double& target) {
  return {name, std::move(value), std::move(help), format_number(target),
          [name, &target](const std::string& text) { return set_double(name, text, target); }};
}

OptionSpec quantity_option(std::string name, std::string help, std::uint64_t& target) {
  return {name, "QUANTITY", std::move(help), format_quantity(target),
          [name, &target](const std::string& text) { return set_quantity(name, text, target); }};
}

OptionSpec share_option(std::string name, std::string help, double& target) {
  return {name, "SHARE", std::move(help), format_number(target), [name, &target](const std::string& text) {
            double value = 0;
            if (auto ok = set_double(name, text, value); !ok) return ok;
            if (!(value > 0 && value <= 1)) return Status(tl::unexpected(bad_value(name, text, "a share above 0 and at most 1")));
            target = value;
            return Status();
          }};
}

OptionSpec seconds_option(std::string name, std::string help, double& seconds) {
  return {name, "DURATION", std::move(help), format_seconds(seconds),
          [name, &seconds](const std::string& text) { return set_seconds(name, text, seconds); }};
}

std::vector<OptionSpec> log_options(LogOptions& o) {
  return {
      {"log_level", "LEVEL", "debug, info, warning or error", std::string(to_string(o.level)),
       [&o](const std::string& t) {
         auto level = parse_log_level(t);
         if (level) o.level = *level;
         return level ? Status() : Status(tl::unexpected(level.error()));
       }},
      {"log_format", "FORMAT", "text or json", std::string(to_string(o.format)),
       [&o](const std::string& t) {
         auto format = parse_log_format(t);
         if (format) o.format = *format;
         return format ? Status() : Status(tl::unexpected(format.error()));
       }},
  };
}

}  // namespace numaserve
