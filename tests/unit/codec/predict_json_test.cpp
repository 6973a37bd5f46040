#include "codec/predict_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <random>

#include <nlohmann/json.hpp>

namespace numaserve::codec {
namespace {

const api::RequestLimits kLimits{};

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

// Items that are their string id alone take a shorter way through the
// reader than the others: mixed in one list, each is read as written, in
// order, and the limit counts both.
TEST(PredictJson, PlainAndFullItemsMixedKeepTheirOrderAndTheLimit) {
  auto r = parse_predict_request(R"({"user": {}, "items": [{"id": "a"}, {"id": 7}, {"id": "b", "features": {"p": 1}},
      {"features": {"p": 2}, "id": "c"}, {"id": "d\u00e9"}, {"id": ""}]})",
                                 kLimits);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  std::vector<std::string> ids;
  for (const auto& item : r->features.items) ids.push_back(item.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "7", "b", "c", "d\xC3\xA9", ""}));
  EXPECT_TRUE(r->features.items[0].features.empty());
  EXPECT_EQ(std::get<double>(r->features.items[3].features.at("p")), 2.0);

  api::RequestLimits limits;
  limits.max_items = 2;
  auto many = parse_predict_request(R"({"user": {}, "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"x": 1}]})", limits);
  ASSERT_FALSE(many.has_value());
  EXPECT_EQ(many.error().message, "items: 4 items; the limit is 2");
  auto unknown = parse_predict_request(R"({"user": {}, "items": [{"id": "a"}, {"ids": "b"}]})", kLimits);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().field, "items[1].ids");
}

TEST(PredictJson, MinimalRequest) {
  auto r = parse_predict_request(R"({"user": {}, "items": [{"id": "i"}]})", kLimits);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_FALSE(r->model.has_value());
  EXPECT_TRUE(r->features.user.id.empty());
}

TEST(PredictJson, ParametersCarryAPriorityAndATimeoutAsWritten) {
  auto r = parse_predict_request(R"({"user": {}, "items": [{"id": "i"}], "parameters": {"priority": 2, "timeout": -5}})",
                                 kLimits);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->scheduling.priority, 2);
  EXPECT_EQ(r->scheduling.timeout_us, -5);  // the service refuses it, naming the field
  auto big = parse_predict_request(R"({"user": {}, "items": [{"id": "i"}], "parameters": {"priority": 18446744073709551615}})",
                                   kLimits);
  ASSERT_TRUE(big.has_value()) << big.error().message;
  EXPECT_EQ(big->scheduling.priority, std::numeric_limits<std::int64_t>::max());
  EXPECT_FALSE(parse_predict_request(R"({"user": {}, "items": [{"id": "i"}]})", kLimits)->scheduling.priority);
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
           {R"({"user": {}, "items": [{"id": "i"}], "parameters": [1]})", "parameters"},
           {R"({"user": {}, "items": [{"id": "i"}], "parameters": {"priority": 1.5}})", "parameters.priority"},
           {R"({"user": {}, "items": [{"id": "i"}], "parameters": {"timeout": "1s"}})", "parameters.timeout"},
           {R"({"user": {}, "items": [{"id": "i"}], "parameters": {"sequence_id": 1}})", "parameters.sequence_id"},
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
           // Keys a path cannot show plainly are quoted.
           {R"({"user": {}, "items": [{"id": "a"}], "": 1})", R"([""])"},
           {R"({"user": {"x.y": 1}, "items": [{"id": "a"}]})", R"(user["x.y"])"},
           {R"({"user": {}, "items": [{"id": "a", "features": {"p[0]": true}}]})", R"(items[0].features["p[0]"])"},
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
  api::RequestLimits limits;
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

// The parser reads events, not a document: whatever valid request it is
// given, it must come out as the document says (checked against nlohmann's
// own DOM of the same text).
TEST(PredictJson, ParsesRandomValidRequestsAsTheirDocumentSays) {
  std::mt19937 rng(11);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  auto random_features = [&] {
    nlohmann::json f = nlohmann::json::object();
    for (std::size_t k = 0, n = pick(4); k < n; ++k) {
      const std::string name = "f" + std::to_string(pick(6));
      switch (pick(4)) {
        case 0: f[name] = static_cast<double>(rng()) / 7.0; break;
        case 1: f[name] = static_cast<int>(rng() % 1000) - 500; break;
        case 2: f[name] = "v\"" + std::to_string(rng()); break;
        default: f[name] = nlohmann::json::array({"a", static_cast<int>(pick(99)), "c\u00e9"}); break;
      }
    }
    return f;
  };
  for (int round = 0; round < 200; ++round) {
    nlohmann::json doc = {{"user", {{"id", pick(2) ? nlohmann::json("u" + std::to_string(rng())) : nlohmann::json(rng())}}}};
    if (pick(2)) doc["user"]["features"] = random_features();
    if (pick(2)) doc["context"] = random_features();
    if (pick(2)) doc["model"] = "m" + std::to_string(pick(3));
    if (pick(2)) doc["request_id"] = pick(2) ? nlohmann::json("r-" + std::to_string(rng())) : nlohmann::json(pick(1000));
    doc["items"] = nlohmann::json::array();
    for (std::size_t i = 0, n = 1 + pick(40); i < n; ++i) {
      nlohmann::json item = {{"id", pick(3) ? nlohmann::json("i" + std::to_string(rng())) : nlohmann::json(pick(100000))}};
      if (pick(4) == 0) item["features"] = random_features();
      doc["items"].push_back(item);
    }
    auto r = parse_predict_request(doc.dump(), kLimits);
    ASSERT_TRUE(r.has_value()) << doc.dump() << " -> " << r.error().message;
    auto id = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    auto same = [&](const features::Features& got, const nlohmann::json& want) {
      ASSERT_EQ(got.size(), want.size()) << doc.dump();
      for (const auto& [name, v] : want.items()) {
        const auto& value = got.at(name);
        if (v.is_number()) {
          EXPECT_EQ(std::get<double>(value), v.get<double>());
        }
        if (v.is_string()) {
          EXPECT_EQ(std::get<std::string>(value), v.get<std::string>());
        }
        if (v.is_array()) {
          std::vector<std::string> ids;
          for (const auto& x : v) ids.push_back(id(x));
          EXPECT_EQ(std::get<std::vector<std::string>>(value), ids);
        }
      }
    };
    EXPECT_EQ(r->features.user.id, id(doc["user"]["id"]));
    same(r->features.user.features, doc["user"].value("features", nlohmann::json::object()));
    same(r->features.context, doc.value("context", nlohmann::json::object()));
    EXPECT_EQ(r->model.has_value(), doc.contains("model"));
    EXPECT_EQ(r->request_id, doc.contains("request_id") ? id(doc["request_id"]) : "");
    ASSERT_EQ(r->features.items.size(), doc["items"].size());
    for (std::size_t i = 0; i < doc["items"].size(); ++i) {
      EXPECT_EQ(r->features.items[i].id, id(doc["items"][i]["id"]));
      same(r->features.items[i].features, doc["items"][i].value("features", nlohmann::json::object()));
    }
  }
}

TEST(PredictJson, ARepeatedKeyTakesItsLastValue) {
  auto r = parse_predict_request(
      R"({"user": {"id": "a"}, "user": {"id": "b"}, "items": [{"id": "x"}], "items": [{"id": "y", "id": "z"}]})", kLimits);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->features.user.id, "b");
  ASSERT_EQ(r->features.items.size(), 1u);
  EXPECT_EQ(r->features.items[0].id, "z");
}

// The body is JSON or it is not, whichever parser reads it: simdjson (the
// service's) must draw the line where nlohmann (everything else's, and the
// reference) does, on valid requests broken one byte at a time and on the
// corners of the grammar. Two differences by design: integers beyond 64
// bits, which nlohmann reads as doubles, are refused, and so is anything
// after a NUL byte, where nlohmann stops reading as if the body ended.
TEST(PredictJson, AcceptsExactlyWhatNlohmannAccepts) {
  auto syntax_error = [](const Result<PredictRequest>& r) {
    return !r.has_value() && r.error().field == "body" && r.error().message != "body: want a JSON object";
  };
  auto check = [&](const std::string& body) {
    const bool valid = nlohmann::json::accept(body);
    const auto r = parse_predict_request(body, kLimits);
    EXPECT_EQ(syntax_error(r), !valid) << "body: " << body << (r ? std::string() : " -> " + r.error().message);
  };
  for (const std::string& body : std::vector<std::string>{
           "{}", "{} x", "{}{}", "", " \t\r\n ", "nan", "[1,]", R"({"a":1,})", R"({"a" 1})", "[1 2]", "[01]", "[-0]",
           "[1.]", "[.5]", "[-]", "[1E+2]", "[0.0e-0]", "[1e999]", "[tru]", "[true,false,null]", R"(["\x"])",
           R"(["\ud800"])", R"(["\udc00\ud800"])", R"(["\ud83d\ude00"])", R"(["\u0000"])", R"(["\/"])",
           "[\"a\tb\"]", "[\"\xff\"]", "[\"\xc0\xaf\"]", "[\"\xed\xa0\x80\"]", "[\"\x7f\"]", "\xef\xbb\xbf{}",
           R"({"":1})", "[18446744073709551615]", "[-9223372036854775808]"}) {
    check(body);
  }
  const std::string valid =
      R"({"model": "ranker_a", "request_id": 7, "user": {"id": "u1", "features": {"age": 31.5, "tags": ["a", "\u00e9"]}},)"
      R"( "context": {"hour": -3, "device": "ios"}, "items": [{"id": "i1"}, {"id": 2, "features": {"price": 1e-3}}]})";
  ASSERT_TRUE(parse_predict_request(valid, kLimits).has_value());
  const std::string alphabet = "{}[]:,\"\\ -+.0123456789eEtrufalsn\x01\x80\xc3\xa9\xff";
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    std::string body = valid;
    const auto at = rng() % body.size();
    switch (rng() % 3) {
      case 0: body.erase(at, 1); break;
      case 1: body.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
      default: body[at] = alphabet[rng() % alphabet.size()]; break;
    }
    check(body);
  }
  // By design: a number out of 64-bit range is refused, naming why.
  auto big = parse_predict_request(R"({"user": {}, "items": [{"id": 123456789012345678901234}]})", kLimits);
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().message, "body: not valid JSON: a malformed number, or one beyond 64-bit integers and doubles");
  EXPECT_TRUE(syntax_error(parse_predict_request(valid + std::string("\0{", 2), kLimits)));
}

TEST(PredictJson, TooManyFeaturesOrIdsNameTheLimit) {
  api::RequestLimits limits;
  limits.max_features_per_entity = 2;
  limits.max_list_length = 2;
  auto features = parse_predict_request(R"({"user": {"features": {"a": 1, "b": 2, "c": 3}}, "items": [{"id": 1}]})", limits);
  ASSERT_FALSE(features.has_value());
  EXPECT_EQ(features.error().message, "user.features: more than 2 features; the limit is 2");
  // Items beyond the limit are counted, nested content and all, for the message.
  limits.max_items = 1;
  auto items = parse_predict_request(R"({"user": {}, "items": [{"id": 1}, {"id": [[2]], "x": {"y": [3]}}, 4, []]})", limits);
  ASSERT_FALSE(items.has_value());
  EXPECT_EQ(items.error().message, "items: 4 items; the limit is 1");
}

TEST(PredictJson, ResponseCarriesScoresInOrder) {
  const auto body = nlohmann::json::parse(to_json({"ranker_a", "3", "r-1", {0.25f, 0.5f}}));
  EXPECT_EQ(body["model"], "ranker_a");
  EXPECT_EQ(body["model_version"], "3");
  EXPECT_EQ(body["request_id"], "r-1");
  EXPECT_EQ(body["scores"], nlohmann::json::parse("[0.25, 0.5]"));
}

// The reply is written by hand; it must read back as exactly the floats the
// model produced, with strings escaped and non-finite scores as null.
TEST(PredictJson, ResponseIsExactJsonForAnyScoreAndId) {
  const std::vector<float> scores = {0.17319746f, 1e-30f, 3.4e38f, -0.0f, 1.0f, 1.0f / 3, 0.1f, 123456.0f,
                                     std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::denorm_min()};
  const std::string id = "r\"1\\\n\u00e9\x01";
  const std::string text = to_json({"ranker_a", "v\"2", id, scores});
  const auto body = nlohmann::json::parse(text);
  EXPECT_EQ(body["request_id"], id);
  EXPECT_EQ(body["model_version"], "v\"2");
  ASSERT_EQ(body["scores"].size(), scores.size());
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (!std::isfinite(scores[i])) {
      EXPECT_TRUE(body["scores"][i].is_null()) << i;
    } else {
      EXPECT_EQ(body["scores"][i].get<float>(), scores[i]) << i;
    }
  }
  // What nlohmann itself would have written for the same reply, but each
  // score in the shortest text that reads back as the same float32 (nlohmann
  // widens it to a double: 0.1f is 0.10000000149011612 there), a float
  // always with its point or exponent.
  std::string want = nlohmann::json{{"model", "ranker_a"}, {"model_version", "v\"2"}, {"request_id", id},
                                    {"scores", nlohmann::json::array()}}.dump();
  want.replace(want.find("[]"), 2, "[0.17319746,1e-30,3.4e+38,-0.0,1.0,0.33333334,0.1,123456.0,null,null,1e-45]");
  EXPECT_EQ(text, want);
}

}  // namespace
}  // namespace numaserve::codec
