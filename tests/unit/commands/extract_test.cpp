// `numaserve extract` by its output: what /predict would feed the model,
// line by line, and what it would refuse, with the status and field.
#include "commands/extract.h"

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "codec/predict_json.h"
#include "feature_store/embedded.h"
#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve::commands {
namespace {

using nlohmann::json;

std::vector<json> run(const std::string& input) {
  ExtractConfig config{(testing::fixtures_dir() / "features").string(),
                       (testing::fixtures_dir() / "features/store.jsonl").string()};
  std::istringstream in(input);
  std::ostringstream out;
  const auto done = run_extract(config, in, out);
  EXPECT_TRUE(done.has_value()) << done.error().message;
  std::vector<json> lines;
  std::istringstream text(out.str());
  for (std::string line; std::getline(text, line);) lines.push_back(json::parse(line));
  return lines;
}

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

TEST(Extract, EachLineGetsTheTensorsExtractionMakesBitForBit) {
  const std::string body =
      R"({"user": {"id": "u1"}, "context": {"hour": 7}, "items": [{"id": "i1"}, {"id": "i2", "features": {"price": 0.1}}]})";
  const auto lines = run(body + "\n" + body);  // the last line without its newline
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], lines[1]);

  const auto file = testing::fixtures_dir() / "features/model.yaml";
  const auto spec = features::parse_model_spec(read_text_file(file).value(), file.string()).value();
  const auto entities = feature_store::Entities::load(testing::fixtures_dir() / "features/store.jsonl").value();
  const auto request = codec::parse_predict_request(body, {}).value();
  const auto expected = feature_store::extract(spec, request.features, *entities).value();
  const json& got = lines[0];
  ASSERT_EQ(got["rows"], expected.rows);
  ASSERT_EQ(got["dense_width"], expected.dense_width);
  ASSERT_EQ(got["dense"].size(), expected.dense.size());
  for (std::size_t i = 0; i < expected.dense.size(); ++i) {
    EXPECT_EQ(bits(static_cast<float>(got["dense"][i].get<double>())), bits(expected.dense[i])) << i;
  }
  ASSERT_EQ(got["bags"].size(), expected.bags.size());
  for (std::size_t k = 0; k < expected.bags.size(); ++k) {
    EXPECT_EQ(got["bags"][k]["indices"].get<std::vector<std::int64_t>>(), expected.bags[k].indices);
    EXPECT_EQ(got["bags"][k]["offsets"].get<std::vector<std::int64_t>>(), expected.bags[k].offsets);
  }
}

TEST(Extract, RefusalsAreThePredictRoutesBodies) {
  const auto lines = run("{\n"
                         R"({"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": "cheap"}}]})" "\n"
                         R"({"model": "other", "user": {"id": "u1"}, "items": [{"id": "i1"}]})" "\n");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["status"], 400);
  EXPECT_EQ(lines[0]["field"], "body");
  EXPECT_EQ(lines[1]["status"], 400);
  EXPECT_EQ(lines[1]["field"], "items[0].features.price");
  EXPECT_EQ(lines[2]["status"], 404);
  EXPECT_EQ(lines[2]["field"], "model");
}

TEST(Extract, AModelDirectoryWithoutModelYamlIsNamed) {
  std::istringstream in("{}");
  std::ostringstream out;
  const auto done = run_extract({"/no/such/dir", ""}, in, out);
  ASSERT_FALSE(done.has_value());
  EXPECT_NE(done.error().message.find("/no/such/dir/model.yaml"), std::string::npos) << done.error().message;
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace numaserve::commands
