#include "http/predict_json.h"

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

namespace numaserve::http {
namespace {

const RequestLimits kLimits{};

TEST(PredictJson, ParsesTheDocumentedRequest) {
  auto r = parse_predict_request(R"({"model": "ranker_a", "request_id": "r-1",
      "user": {"id": "u1", "features": {"age": 31, "country": "fr"}},
      "context": {"hour": 13},
      "items": [{"id": "i1"}, {"id": 42, "features": {"price": 9.5, "tags": ["a", 7]}}]})",
                                 kLimits);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->model, "ranker_a");
  EXPECT_EQ(r->request_id, "r-1");
  EXPECT_EQ(r->features.user.id, "u1");
  EXPECT_EQ(std::get<double>(r->features.user.features.at("age")), 31.0);
  EXPECT_EQ(std::get<double>(r->features.context.at("hour")), 13.0);
  ASSERT_EQ(r->features.items.size(), 2u);
  EXPECT_EQ(r->features.items[1].id, "42");
  EXPECT_EQ(std::get<std::vector<std::string>>(r->features.items[1].features.at("tags")),
            (std::vector<std::string>{"a", "7"}));
}

TEST(PredictJson, MinimalRequest) {
  auto r = parse_predict_request(R"({"user": {}, "items": [{"id": "i"}]})", kLimits);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_FALSE(r->model.has_value());
  EXPECT_TRUE(r->features.user.id.empty());
}

TEST(PredictJson, EveryRejectionNamesItsField) {
  struct Case {
    std::string body;
    std::string field;
  };
  for (const auto& c : std::vector<Case>{
           {"{", "body"},
           {"[1]", "body"},
           {R"({"items": [{"id": 1}]})", "user"},
           {R"({"user": {}, "items": []})", "items"},
           {R"({"user": {}, "items": {"id": 1}})", "items"},
           {R"({"user": {}, "items": [{"features": {}}]})", "items[0].id"},
           {R"({"user": {}, "items": [{"id": 1.5}]})", "items[0].id"},
           {R"({"user": {}, "items": [{"id": "a", "score": 1}]})", "items[0].score"},
           {R"({"user": {"id": "u", "features": {"x": {"y": 1}}}, "items": [{"id": "a"}]})", "user.features.x"},
           {R"({"user": {}, "items": [{"id": "a", "features": {"t": ["a", null]}}]})", "items[0].features.t[1]"},
           {R"({"user": {}, "context": [1], "items": [{"id": "a"}]})", "context"},
           {R"({"user": {}, "model": 3, "items": [{"id": "a"}]})", "model"},
           {R"({"user": {}, "items": [{"id": "a"}], "extra": true})", "extra"},
           {R"({"user": {}, "items": [{"id": "a", "features": {"p": true}}]})", "items[0].features.p"},
       }) {
    auto r = parse_predict_request(c.body, kLimits);
    ASSERT_FALSE(r.has_value()) << c.body;
    EXPECT_EQ(r.error().field, c.field) << c.body << " -> " << r.error().message;
    const auto body = nlohmann::json::parse(error_json(r.error()));
    EXPECT_EQ(body["field"], c.field);
    EXPECT_EQ(body["error"], r.error().message);
  }
}

TEST(PredictJson, LimitsAreEnforcedWithTheNumbers) {
  RequestLimits limits;
  limits.max_items = 3;
  limits.max_list_length = 2;
  auto many = parse_predict_request(R"({"user": {}, "items": [{"id":1},{"id":2},{"id":3},{"id":4}]})", limits);
  ASSERT_FALSE(many.has_value());
  EXPECT_EQ(many.error().message, "items: 4 items; the limit is 3");
  auto long_list = parse_predict_request(R"({"user": {}, "items": [{"id":1,"features":{"t":["a","b","c"]}}]})", limits);
  ASSERT_FALSE(long_list.has_value());
  EXPECT_EQ(long_list.error().field, "items[0].features.t");
}

TEST(PredictJson, HostileBodiesAreRejectedWithoutCrashing) {
  // 100k nested arrays, NaN/Infinity spelled out, random bytes, a huge item list.
  EXPECT_FALSE(parse_predict_request(std::string(100000, '[') + std::string(100000, ']'), kLimits).has_value());
  EXPECT_FALSE(parse_predict_request(R"({"user": {}, "items": [{"id": "a", "features": {"p": NaN}}]})", kLimits));
  EXPECT_FALSE(parse_predict_request(R"({"user": {}, "items": [{"id": "a", "features": {"p": 1e999}}]})", kLimits));
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string junk(static_cast<std::size_t>(rng() % 512), '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    EXPECT_FALSE(parse_predict_request(junk, kLimits).has_value());
  }
  std::string big = R"({"user": {}, "items": [)";
  for (int i = 0; i < 100000; ++i) big += (i ? ",{\"id\":" : "{\"id\":") + std::to_string(i) + "}";
  big += "]}";
  auto r = parse_predict_request(big, kLimits);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "items: 100000 items; the limit is 2000");
}

TEST(PredictJson, ResponseCarriesScoresInOrder) {
  const auto body = nlohmann::json::parse(to_json({"ranker_a", "3", "r-1", {0.25f, 0.5f}}));
  EXPECT_EQ(body["model"], "ranker_a");
  EXPECT_EQ(body["version"], "3");
  EXPECT_EQ(body["request_id"], "r-1");
  EXPECT_EQ(body["scores"], nlohmann::json::parse("[0.25, 0.5]"));
}

}  // namespace
}  // namespace numaserve::http
