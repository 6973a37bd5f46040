#include "numaserve/common/options.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "numaserve/common/duration.h"

namespace numaserve {
namespace {

struct Config {
  unsigned workers = 1;
  double interval = 60;
  bool oneshot = false;
  std::string dir = "/var/lib/x";
};

OptionTable table_for(Config& c) {
  return OptionTable({
      {"workers", "N", "worker threads", "1", [&c](const std::string& t) { return set_unsigned("workers", t, c.workers); }},
      {"interval", "DURATION", "how often", "60s", [&c](const std::string& t) { return set_seconds("interval", t, c.interval); }},
      {"oneshot", "", "run once", "false", [&c](const std::string& t) { return set_bool("oneshot", t, c.oneshot); }},
      {"state_dir", "DIR", "where state goes", "/var/lib/x", [&c](const std::string& t) { c.dir = t; return Status{}; }},
  });
}

// Parses `args` with the table on a fresh CLI11 app, then applies it.
Status parse(OptionTable& table, std::vector<std::string> args) {
  CLI::App app;
  table.add_to(app);
  std::vector<const char*> argv{"prog"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return make_error(Error::Code::kInvalidArgument, e.what());
  }
  return table.apply();
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(Options, NamesDeriveFromOneKey) {
  Config c;
  const auto table = table_for(c);
  EXPECT_EQ(table.rows()[3].flag(), "--state-dir");
  EXPECT_EQ(table.rows()[3].env(), "NUMASERVE_STATE_DIR");
}

TEST(Options, DuplicateRowsAreRejected) {
  Config c;
  auto rows = table_for(c).rows();
  EXPECT_TRUE(OptionTable(rows).check_unique().has_value());
  rows.push_back(rows[0]);
  auto dup = OptionTable(rows).check_unique();
  ASSERT_FALSE(dup.has_value());
  EXPECT_NE(dup.error().message.find("'workers' is declared twice"), std::string::npos);
  EXPECT_FALSE(OptionTable({{"config", "F", "", "", nullptr}}).check_unique().has_value());
}

TEST(Options, PrecedenceIsDefaultThenYamlThenEnvThenFlag) {
  const std::string file = write_temp("numaserve-options.yaml", "workers: 2\ninterval: 5m\nstate_dir: /from/yaml\n");
  Config c;
  auto table = table_for(c);
  ::setenv("NUMASERVE_INTERVAL", "30s", 1);
  ::setenv("NUMASERVE_WORKERS", "3", 1);
  const auto status = parse(table, {"--config", file, "--workers", "4"});
  ::unsetenv("NUMASERVE_INTERVAL");
  ::unsetenv("NUMASERVE_WORKERS");
  ASSERT_TRUE(status.has_value()) << status.error().message;
  EXPECT_EQ(c.workers, 4u);          // flag beats env and YAML
  EXPECT_DOUBLE_EQ(c.interval, 30);  // env beats YAML
  EXPECT_EQ(c.dir, "/from/yaml");    // YAML beats default
  EXPECT_FALSE(c.oneshot);           // default
}

TEST(Options, SwitchesFromFlagAndEnvironment) {
  Config c;
  auto table = table_for(c);
  ASSERT_TRUE(parse(table, {"--oneshot"}).has_value());
  EXPECT_TRUE(c.oneshot);
  Config d;
  auto from_env = table_for(d);
  ::setenv("NUMASERVE_ONESHOT", "true", 1);
  const auto status = parse(from_env, {});
  ::unsetenv("NUMASERVE_ONESHOT");
  ASSERT_TRUE(status.has_value()) << status.error().message;
  EXPECT_TRUE(d.oneshot);
}

TEST(Options, RepeatableOptionsTakeListsAndTheLastSourceWins) {
  std::string dirs;
  auto table_of = [&dirs] {
    OptionSpec row{"model_dir", "DIR", "a model", "", [&dirs](const std::string& t) { dirs = t; return Status{}; }};
    row.repeatable = true;
    return OptionTable({row});
  };
  auto flags = table_of();
  ASSERT_TRUE(parse(flags, {"--model-dir", "a", "--model-dir", "b"}).has_value());
  EXPECT_EQ(dirs, "a,b");

  const std::string file = write_temp("numaserve-list.yaml", "model_dir: [x, y]\n");
  auto yaml_then_flag = table_of();
  ASSERT_TRUE(parse(yaml_then_flag, {"--config", file}).has_value());
  EXPECT_EQ(dirs, "x,y");
  auto flag_wins = table_of();
  ASSERT_TRUE(parse(flag_wins, {"--config", file, "--model-dir", "z"}).has_value());
  EXPECT_EQ(dirs, "z");
  EXPECT_NE(table_of().markdown().find("(repeatable)"), std::string::npos);
}

TEST(Options, UnknownYamlKeyNamesFileAndLine) {
  Config c;
  auto table = table_for(c);
  auto status = table.apply_yaml("workers: 2\nworkres: 3\n", "agent.yaml");
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().message, "agent.yaml line 2: unknown option 'workres'");
}

TEST(Options, BadValuesNameOptionAndSource) {
  Config c;
  auto table = table_for(c);
  auto from_yaml = table.apply_yaml("interval: soon\n", "agent.yaml");
  ASSERT_FALSE(from_yaml.has_value());
  EXPECT_EQ(from_yaml.error().message, "agent.yaml line 1: interval: 'soon' is not a duration (30, 30s, 5m, 250ms, 1m30s) up to 1e9 s");
  auto from_flag = parse(table, {"--workers", "-2"});
  ASSERT_FALSE(from_flag.has_value());
  EXPECT_EQ(from_flag.error().message, "--workers / NUMASERVE_WORKERS: workers: '-2' is not a whole number");
  EXPECT_FALSE(table.apply_yaml("workers: [1, 2]\n", "a.yaml").has_value());
  EXPECT_FALSE(table.apply_yaml("- workers\n", "a.yaml").has_value());
  EXPECT_FALSE(table.apply_yaml("workers: 1\n  bad indent: [\n", "a.yaml").has_value());
  // YAML allows a list or a map as a key; yaml-cpp throws when it is read as text.
  auto complex_key = table.apply_yaml("workers: 1\n? [a, b]\n: 2\n", "a.yaml");
  ASSERT_FALSE(complex_key.has_value());
  EXPECT_EQ(complex_key.error().message, "a.yaml line 2: a key must be a name, not a list or a map");
}

TEST(Options, Durations) {
  double s = 0;
  for (const auto& [text, want] : std::vector<std::pair<std::string, double>>{
           {"30", 30}, {"30s", 30}, {"5m", 300}, {"250ms", 0.25}, {"1h", 3600}, {"1.5s", 1.5},
           // Go's syntax, as the chart's schema admits it.
           {"1m30s", 90}, {"500us", 0.0005}, {"500\u00b5s", 0.0005}, {"100ns", 1e-7}, {"1h0m0.5s", 3600.5}}) {
    ASSERT_TRUE(set_seconds("t", text, s).has_value()) << text;
    EXPECT_DOUBLE_EQ(s, want) << text;
  }
  for (const char* bad : {"", "s", "-1s", "1d", "nan", "1 s", "inf", "2e9", "17000000m", "1m30", "1.2.3s", "m5", "5ms5"}) {
    EXPECT_FALSE(set_seconds("t", bad, s).has_value()) << bad;
  }
  EXPECT_EQ(format_seconds(60), "60s");
  EXPECT_EQ(format_seconds(0.25), "250ms");
  EXPECT_EQ(format_seconds(0), "0s");
}

TEST(Options, SharesAreAboveZeroAndAtMostOne) {
  double share = 0.25;
  const OptionSpec spec = share_option("cpu_share", "a share", share);
  EXPECT_EQ(spec.default_text, "0.25");
  for (const auto& [text, want] : std::vector<std::pair<std::string, double>>{{"1", 1}, {"0.5", 0.5}, {"1e-3", 0.001}}) {
    ASSERT_TRUE(spec.set(text).has_value()) << text;
    EXPECT_DOUBLE_EQ(share, want) << text;
  }
  for (const char* bad : {"0", "-0.5", "1.01", "2", "nan", "", "half"}) {
    auto refused = spec.set(bad);
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_NE(refused.error().message.find("cpu_share: '" + std::string(bad) + "'"), std::string::npos) << refused.error().message;
  }
  EXPECT_DOUBLE_EQ(share, 0.001);  // a refused value changes nothing
}

TEST(Options, MarkdownTableListsEveryRow) {
  Config c;
  const std::string md = table_for(c).markdown();
  EXPECT_NE(md.find("| `--state-dir DIR` | `NUMASERVE_STATE_DIR` | `state_dir` | `/var/lib/x` | where state goes |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `--oneshot` | `NUMASERVE_ONESHOT` | `oneshot` |"), std::string::npos) << md;
}

// Seconds <-> durations: truncated toward zero, as duration_cast does.
TEST(Duration, SecondsConvertOneWayEverywhere) {
  EXPECT_EQ(to_duration(1.5), std::chrono::milliseconds(1500));
  EXPECT_EQ(to_duration<std::chrono::milliseconds>(0.0019), std::chrono::milliseconds(1));
  EXPECT_EQ(to_duration<std::chrono::seconds>(-1.9), std::chrono::seconds(-1));
  EXPECT_DOUBLE_EQ(to_seconds(std::chrono::milliseconds(250)), 0.25);
  EXPECT_DOUBLE_EQ(to_seconds(to_duration(kMaxSeconds)), kMaxSeconds);
}

}  // namespace
}  // namespace numaserve
