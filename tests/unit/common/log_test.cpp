#include "numaserve/common/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "numaserve/common/names.h"

namespace numaserve {
namespace {

// Captures what log() writes to std::cerr.
std::string captured(LogLevel configured, LogFormat format, LogLevel level, const LogFields& fields) {
  configure_logging("test", configured, format);
  std::ostringstream out;
  auto* old = std::cerr.rdbuf(out.rdbuf());
  log(level, "model loaded", fields);
  std::cerr.rdbuf(old);
  configure_logging("numaserve", LogLevel::kInfo, LogFormat::kText);
  return out.str();
}

TEST(Log, TextQuotesValuesWithSpaces) {
  const auto line = captured(LogLevel::kInfo, LogFormat::kText, LogLevel::kWarning, {{"cpus", "0-3"}, {"why", "a b"}});
  EXPECT_NE(line.find(" level=warning component=test msg=\"model loaded\" cpus=0-3 why=\"a b\"\n"), std::string::npos)
      << line;
}

TEST(Log, TextValuesAreOneKeyEachWhateverTheyHold) {
  // A component with spaces (a worker's), a newline that would forge a line,
  // an empty value, a backslash, and bytes that are not UTF-8.
  configure_logging("worker-0 (node 0)", LogLevel::kInfo, LogFormat::kText);
  std::ostringstream out;
  auto* old = std::cerr.rdbuf(out.rdbuf());
  log(LogLevel::kInfo, "x", {{"path", "/a\nlevel=error msg=forged"}, {"empty", ""}, {"dir", "C:\\x"}, {"raw", "\xff\xfe"}});
  std::cerr.rdbuf(old);
  configure_logging("numaserve", LogLevel::kInfo, LogFormat::kText);
  const std::string line = out.str();
  EXPECT_NE(line.find(" component=\"worker-0 (node 0)\" msg=x path=\"/a\\nlevel=error msg=forged\" empty=\"\" "
                      "dir=\"C:\\\\x\" raw=\"\xef\xbf\xbd\xef\xbf\xbd\"\n"),
            std::string::npos)
      << line;
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
}

TEST(Log, JsonIsOneObjectPerLine) {
  const auto line = captured(LogLevel::kInfo, LogFormat::kJson, LogLevel::kError, {{"port", "8080"}});
  const auto parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["level"], "error");
  EXPECT_EQ(parsed["msg"], "model loaded");
  EXPECT_EQ(parsed["port"], "8080");
  EXPECT_EQ(parsed["component"], "test");
}

TEST(Log, BelowTheLevelIsDropped) {
  EXPECT_EQ(captured(LogLevel::kWarning, LogFormat::kText, LogLevel::kInfo, {}), "");
}

TEST(Log, LevelsAndFormatsParseOrNameTheOption) {
  EXPECT_EQ(parse_log_level("debug").value(), LogLevel::kDebug);
  EXPECT_EQ(parse_log_format("json").value(), LogFormat::kJson);
  EXPECT_EQ(parse_log_level("loud").error().field, "log_level");
  EXPECT_EQ(parse_log_format("xml").error().field, "log_format");
}

// The one enum <-> string helper the log's names (and the agent's) go through.
enum class Color { kRed, kGreen, kBlue };
constexpr auto kColorNames = make_names<Color>({{Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kBlue, "blue"}});
static_assert(kColorNames.name(Color::kGreen) == "green");
static_assert(kColorNames.parse("blue") == Color::kBlue);

TEST(Names, ParseAndNameReadOneTable) {
  for (const auto& [color, name] : kColorNames.table) {
    EXPECT_EQ(kColorNames.name(color), name);
    EXPECT_EQ(kColorNames.parse(name), color);
  }
  EXPECT_EQ(kColorNames.parse("Red"), std::nullopt);  // exact
  EXPECT_EQ(kColorNames.name(static_cast<Color>(7)), "");
  EXPECT_EQ(kColorNames.choices(), "red, green or blue");
  EXPECT_EQ(make_names<Color>({{Color::kRed, "red"}}).choices(), "red");
}

}  // namespace
}  // namespace numaserve
