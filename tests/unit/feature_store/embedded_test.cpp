// The embedded store: the JSON Lines file read with every error named by
// file and line, each model's items extracted once at open, and a fetch
// that completes at once, on the caller's thread.
#include "feature_store/embedded.h"

#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve::feature_store {
namespace {

features::ModelSpec fixture_spec() {
  const auto file = testing::fixtures_dir() / "features/model.yaml";
  return features::parse_model_spec(read_text_file(file).value(), file.string()).value();
}

TEST(FeatureStore, ErrorsNameFileAndLine) {
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{\"kind\": \"user\", \"id\": \"u\"}\n{oops\n", "s.jsonl line 2: not a JSON object"},
           {"{\"kind\": \"shop\", \"id\": \"u\"}\n", "s.jsonl line 1: kind must be \"user\" or \"item\""},
           {"{\"kind\": 3, \"id\": \"u\"}\n", "kind must be"},
           {"{\"kind\": \"item\", \"id\": [1]}\n", "id must be a string or an integer"},
           {"{\"kind\": \"item\", \"id\": \"a\", \"features\": {\"x\": {\"y\": 1}}}\n", "feature 'x' must be"},
           {"{\"kind\": \"item\", \"id\": \"a\"}\n{\"kind\": \"item\", \"id\": \"a\"}\n", "line 2: item 'a' appears twice"},
       }) {
    auto store = Entities::parse(text, "s.jsonl");
    ASSERT_FALSE(store.has_value()) << text;
    EXPECT_NE(store.error().message.find(expected), std::string::npos) << store.error().message;
  }
  auto missing = Entities::load("/no/such/store.jsonl");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("feature store: cannot read /no/such/store.jsonl"), std::string::npos);
}

TEST(EmbeddedStore, AValueAModelCannotReadFailsTheOpenNamingModelAndItem) {
  const auto spec = fixture_spec();
  auto bad = Entities::parse(R"({"kind": "item", "id": "i9", "features": {"price": "cheap"}})", "s.jsonl");
  ASSERT_TRUE(bad.has_value());
  auto store = EmbeddedStore::open(std::move(*bad), {&spec});
  ASSERT_FALSE(store.has_value());
  EXPECT_NE(store.error().message.find("model " + spec.name), std::string::npos) << store.error().message;
  EXPECT_NE(store.error().message.find("item 'i9' price: want a number"), std::string::npos) << store.error().message;
}

TEST(EmbeddedStore, AFetchCompletesAtOnceWithTheCachedRowsOfItsItems) {
  const auto spec = fixture_spec();
  auto entities = Entities::load(testing::fixtures_dir() / "features/store.jsonl");
  ASSERT_TRUE(entities.has_value());
  auto store = EmbeddedStore::open(std::move(*entities), {&spec});
  ASSERT_TRUE(store.has_value()) << store.error().message;
  features::Request request;
  request.user.id = "u1";
  request.items = {{"i1", {}}, {"i2", {{"price", 1.0}}}, {"unknown", {}}};
  std::optional<Result<Found>> got;
  (*store)->fetch(0, 0, request, [&](Result<Found>&& found) { got = std::move(found); });
  ASSERT_TRUE(got.has_value()) << "the embedded store answers inside fetch()";
  ASSERT_TRUE(got->has_value());
  const Found& found = **got;
  EXPECT_NE(found.stored.user, nullptr);
  ASSERT_NE(found.cache, nullptr);
  ASSERT_EQ(found.stored.cached_rows.size(), 3u);
  EXPECT_GE(found.stored.cached_rows[0], 0);   // a stored item: its row, extracted at open
  EXPECT_EQ(found.stored.cached_rows[1], -1);  // inline features: extracted afresh
  EXPECT_EQ(found.stored.cached_rows[2], -1);  // not in the store: defaults
  EXPECT_FALSE(found.degraded);
  EXPECT_FALSE((*store)->networked());
  EXPECT_FALSE((*store)->stats().has_value());
}

}  // namespace
}  // namespace numaserve::feature_store
