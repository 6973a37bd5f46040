#include "features/extract.h"

#include <gtest/gtest.h>

#include <cmath>

#include "feature_store/embedded.h"
#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve::features {
namespace {

// XXH64 reference values from the xxHash specification (seed 0), so the
// hash contract is checked against the algorithm, not against itself.
TEST(HashContract, Xxh64TestVectors) {
  EXPECT_EQ(hash_id("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(hash_id("a", 0), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(hash_id("abc", 0), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(bucket("abc", 0, 1000), static_cast<std::int64_t>(0x44BC2CF5AD770999ull % 1000));
}

// A model's cache of the embedded store's items, as the store builds it.
Result<ItemCache> build_cache(const ModelSpec& spec, const feature_store::Entities& entities) {
  return ItemCache::build(spec, [&](const EntityVisitor& visit) { entities.for_each_item(visit); });
}

class Extraction : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spec = parse_model_spec(read_text_file(testing::fixtures_dir() / "features/model.yaml").value(), "model.yaml");
    ASSERT_TRUE(spec.has_value()) << spec.error().message;
    spec_ = *spec;
    auto store = feature_store::Entities::load(testing::fixtures_dir() / "features/store.jsonl");
    ASSERT_TRUE(store.has_value()) << store.error().message;
    store_ = std::move(*store);
  }

  Request request(std::vector<std::string> item_ids) const {
    Request r;
    r.user.id = "u1";
    for (auto& id : item_ids) r.items.push_back({std::move(id), {}});
    return r;
  }

  std::int64_t row(const std::string& id, const std::string& table) const {
    return bucket(id, spec_.hash_seed, spec_.tables.at(table));
  }

  ModelSpec spec_;
  std::unique_ptr<feature_store::Entities> store_;
};

TEST_F(Extraction, BuildsDenseColumnsAndBagsFromTheStore) {
  auto batch = feature_store::extract(spec_, request({"i1", "i2", "i3"}), *store_);
  ASSERT_TRUE(batch.has_value()) << batch.error().message;
  ASSERT_EQ(batch->rows, 3u);
  ASSERT_EQ(batch->dense_width, 3u);  // age, price, hour
  // age: standardized (30 - 40) / 10, the same on every row.
  for (std::size_t r = 0; r < 3; ++r) EXPECT_FLOAT_EQ(batch->dense[r * 3 + 0], -1.0f);
  EXPECT_FLOAT_EQ(batch->dense[0 * 3 + 1], static_cast<float>(std::log1p(9.0)));
  EXPECT_FLOAT_EQ(batch->dense[1 * 3 + 1], 5.0f);  // log1p(1000) = 6.9, clipped to 5
  EXPECT_FLOAT_EQ(batch->dense[2 * 3 + 1], 0.0f);  // default
  EXPECT_FLOAT_EQ(batch->dense[2 * 3 + 2], 12.0f); // context default
  ASSERT_EQ(batch->bags.size(), 4u);  // user id, country, item id, tags
  EXPECT_EQ(batch->bags[0].indices, std::vector<std::int64_t>(3, row("u1", "user")));
  EXPECT_EQ(batch->bags[1].indices, std::vector<std::int64_t>(3, row("fr", "country")));
  EXPECT_EQ(batch->bags[2].indices, (std::vector<std::int64_t>{row("i1", "item"), row("i2", "item"), row("i3", "item")}));
  const Bag& tags = batch->bags[3];
  EXPECT_EQ(tags.offsets, (std::vector<std::int64_t>{0, 2, 5}));  // 2 tags, 3 of 5 (max_len), none
  EXPECT_EQ(tags.indices.size(), 5u);
  EXPECT_EQ(tags.indices[0], row("shoes", "tag"));
}

TEST_F(Extraction, InlineFeaturesOverrideTheStoreAndIntegerIdsHashAsText) {
  Request r = request({"i1"});
  r.user.id = "2";  // stored with the integer id 2
  r.user.features["country"] = std::string("de");
  r.items[0].features["price"] = 0.0;
  r.context["hour"] = 23.0;
  auto batch = feature_store::extract(spec_, r, *store_);
  ASSERT_TRUE(batch.has_value()) << batch.error().message;
  EXPECT_FLOAT_EQ(batch->dense[0], 1.5f);  // age 55 from the store: (55 - 40) / 10
  EXPECT_FLOAT_EQ(batch->dense[1], 0.0f);
  EXPECT_FLOAT_EQ(batch->dense[2], 23.0f);
  EXPECT_EQ(batch->bags[0].indices[0], row("2", "user"));
  EXPECT_EQ(batch->bags[1].indices[0], row("de", "country"));
}

TEST_F(Extraction, UnknownEntitiesGetDefaults) {
  Request r = request({"nobody-knows"});
  r.user.id = "ghost";
  auto batch = feature_store::extract(spec_, r, *store_);
  ASSERT_TRUE(batch.has_value()) << batch.error().message;
  EXPECT_FLOAT_EQ(batch->dense[0], 0.0f);  // age default 40, standardized
  EXPECT_EQ(batch->bags[1].indices[0], row("unknown", "country"));
  EXPECT_EQ(batch->bags[2].indices[0], row("nobody-knows", "item"));  // the id itself
}

TEST_F(Extraction, ABatchOfNEqualsNSingleItemBatches) {
  const std::vector<std::string> ids = {"i1", "i2", "i3", "i9"};
  auto all = feature_store::extract(spec_, request(ids), *store_).value();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto one = feature_store::extract(spec_, request({ids[i]}), *store_).value();
    for (std::size_t c = 0; c < all.dense_width; ++c) {
      EXPECT_EQ(one.dense[c], all.dense[i * all.dense_width + c]) << ids[i] << " column " << c;
    }
    for (std::size_t b = 0; b < all.bags.size(); ++b) {
      const auto& bag = all.bags[b];
      const auto begin = bag.offsets[i];
      const auto end = i + 1 < bag.offsets.size() ? bag.offsets[i + 1] : static_cast<std::int64_t>(bag.indices.size());
      EXPECT_EQ(one.bags[b].indices, std::vector<std::int64_t>(bag.indices.begin() + begin, bag.indices.begin() + end))
          << ids[i] << " bag " << b;
    }
  }
}

TEST_F(Extraction, BadInputNamesTheField) {
  struct Case {
    std::function<void(Request&)> change;
    std::string message;
  };
  for (const auto& c : std::vector<Case>{
           {[](Request& r) { r.items[1].features["price"] = std::string("cheap"); },
            "items[1].features.price: want a number, got a string"},
           {[](Request& r) { r.items[0].features["colour"] = std::string("red"); },
            "items[0].features.colour: model tiny_ranker has no item feature of that name"},
           {[](Request& r) { r.context["hour"] = std::nan(""); }, "context.hour: want a finite number"},
           {[](Request& r) { r.items[0].features["price"] = -3.0; }, "items[0].features.price: log1p needs a value above -1"},
           {[](Request& r) { r.items[0].features["tags"] = std::string("red"); },
            "items[0].features.tags: want a list of ids, got a string"},
           {[](Request& r) { r.user.features["country"] = std::vector<std::string>{"fr"}; },
            "user.features.country: want an id, got a list"},
           // 2^53: what 9007199254740993 in JSON becomes, so not the client's id.
           {[](Request& r) { r.user.features["country"] = 9007199254740992.0; },
            "user.features.country: want an id: a whole number of 2^53 or more loses digits as a JSON number; send it as a string"},
           {[](Request& r) { r.user.features["country"] = -1e19; },  // no int64 holds it
            "user.features.country: want an id: a whole number of 2^53 or more loses digits as a JSON number; send it as a string"},
           {[](Request& r) { r.context["weather"] = std::string("rain"); },
            "context.weather: model tiny_ranker has no context feature of that name"},
       }) {
    Request r = request({"i1", "i2"});
    c.change(r);
    auto batch = feature_store::extract(spec_, r, *store_);
    ASSERT_FALSE(batch.has_value()) << c.message;
    EXPECT_NE(batch.error().message.find(c.message), std::string::npos) << batch.error().message;
  }
}

// Of several refusals the one reported is the first in the contract's
// order (dense columns before bags, then by column, then by row), as the
// Python package reports it, though extraction fills the rows one by one.
TEST_F(Extraction, OfSeveralRefusalsTheFirstInTheContractsOrderIsReported) {
  Request r = request({"i1", "i2", "i3"});
  r.items[0].features["tags"] = 5.0;
  r.items[2].features["price"] = std::vector<std::string>{"x"};
  auto batch = extract(spec_, r, store_->query(r));
  ASSERT_FALSE(batch.has_value());
  EXPECT_EQ(batch.error().field, "items[2].features.price");  // a dense column before any bag
  r.items[2].features.erase("price");
  r.items[1].features["tags"] = 6.0;
  batch = extract(spec_, r, store_->query(r));
  ASSERT_FALSE(batch.has_value());
  EXPECT_EQ(batch.error().field, "items[0].features.tags");  // row 0 before row 1
  r.user.features["country"] = 7.5;
  batch = extract(spec_, r, store_->query(r));
  ASSERT_FALSE(batch.has_value());
  EXPECT_EQ(batch.error().field, "user.features.country");  // the user's bag comes before the items' tags
}

TEST_F(Extraction, ConcatenatedBatchesEqualOneBatchOfAllItems) {
  auto one = feature_store::extract(spec_, request({"i1", "i2"}), *store_);
  auto two = feature_store::extract(spec_, request({"i3"}), *store_);
  auto all = feature_store::extract(spec_, request({"i1", "i2", "i3"}), *store_);
  ASSERT_TRUE(one && two && all);
  const Batch joined = concat({&*one, &*two});
  EXPECT_EQ(joined.rows, all->rows);
  EXPECT_EQ(joined.dense, all->dense);
  ASSERT_EQ(joined.bags.size(), all->bags.size());
  for (std::size_t k = 0; k < joined.bags.size(); ++k) {
    EXPECT_EQ(joined.bags[k].indices, all->bags[k].indices) << k;
    EXPECT_EQ(joined.bags[k].offsets, all->bags[k].offsets) << k;
  }
}

// A user's list of ids is extracted once and repeated whole on every row,
// whatever the number of rows (the copies double up to it).
TEST(SharedFeatures, AUsersListRepeatsWholeOnEveryRow) {
  auto spec = parse_model_spec(R"(name: m
version: "1"
hash_seed: 3
tables: {item: 100, recent: 50}
features:
  - {name: id, source: item, kind: id, table: item}
  - {name: recent, source: user, kind: id_list, table: recent, max_len: 5}
)",
                               "model.yaml");
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  const std::vector<std::string> recent{"a", "b", "c"};
  std::vector<std::int64_t> one;
  for (const auto& id : recent) one.push_back(bucket(id, 3, 50));
  for (std::size_t n : {1, 2, 3, 5, 64, 200}) {
    Request r;
    r.user.features["recent"] = recent;
    r.items.resize(n, Entity{"i", {}});
    StoredFeatures stored;
    stored.items.assign(n, nullptr);
    auto batch = extract(*spec, r, stored);
    ASSERT_TRUE(batch.has_value()) << batch.error().message;
    const Bag& bag = batch->bags[1];
    ASSERT_EQ(bag.indices.size(), 3 * n) << n;
    ASSERT_EQ(bag.offsets.size(), n) << n;
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(bag.offsets[i], static_cast<std::int64_t>(3 * i)) << n;
      EXPECT_EQ(std::vector<std::int64_t>(bag.indices.begin() + static_cast<std::ptrdiff_t>(3 * i),
                                          bag.indices.begin() + static_cast<std::ptrdiff_t>(3 * i + 3)),
                one)
          << n << " row " << i;
    }
  }
}

TEST_F(Extraction, TheItemCacheGivesWhatExtractionComputes) {
  auto cache = build_cache(spec_, *store_);
  ASSERT_TRUE(cache.has_value()) << cache.error().message;
  EXPECT_EQ(cache->items(), 3u);
  // Store items, an item the store lacks, and one with an inline override.
  Request r = request({"i2", "i1", "not-stored", "i3", "i1"});
  r.items[4].features["price"] = 3.0;
  r.context["hour"] = 7.0;
  auto computed = extract(spec_, r, store_->query(r));
  const auto stored = store_->query(r, &*cache);
  // One lookup per item: store items come from the cache, the rest from the store.
  const auto& rows = stored.cached_rows;
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_TRUE(rows[0] >= 0 && rows[1] >= 0 && rows[3] >= 0);
  EXPECT_TRUE(rows[0] != rows[1] && rows[1] != rows[3] && rows[0] != rows[3]);
  EXPECT_EQ(rows[2], -1);  // not stored
  EXPECT_EQ(rows[4], -1);  // inline override
  EXPECT_EQ(stored.items[2], nullptr);
  EXPECT_EQ(stored.items[4], store_->item("i1"));
  auto cached = extract(spec_, r, stored, &*cache);
  ASSERT_TRUE(computed && cached);
  EXPECT_EQ(cached->dense, computed->dense);
  ASSERT_EQ(cached->bags.size(), computed->bags.size());
  for (std::size_t k = 0; k < cached->bags.size(); ++k) {
    EXPECT_EQ(cached->bags[k].indices, computed->bags[k].indices) << k;
    EXPECT_EQ(cached->bags[k].offsets, computed->bags[k].offsets) << k;
  }
}

// A store of thousands of items: every cached row found by id is the item's
// own (same batch as computing it), missing ids miss, in any order.
TEST_F(Extraction, TheItemCacheFindsEveryItemOfALargeStore) {
  std::string jsonl = R"({"kind": "user", "id": "u1", "features": {"age": 30}})";
  for (int i = 0; i < 5000; ++i) {
    jsonl += "\n{\"kind\": \"item\", \"id\": \"item-" + std::to_string(i) + "\", \"features\": {\"price\": " +
             std::to_string(i % 97) + ", \"tags\": [\"t" + std::to_string(i % 13) + "\", \"x" + std::to_string(i) + "\"]}}";
  }
  auto store = feature_store::Entities::parse(jsonl, "big.jsonl");
  ASSERT_TRUE(store.has_value()) << store.error().message;
  auto cache = build_cache(spec_, **store);
  ASSERT_TRUE(cache.has_value()) << cache.error().message;
  EXPECT_EQ(cache->items(), 5000u);
  std::vector<std::string> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(i % 7 == 3 ? "absent-" + std::to_string(i) : "item-" + std::to_string((i * 7919) % 5000));
  const Request r = request(ids);
  const auto stored = (*store)->query(r, &*cache);
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(stored.cached_rows[i] < 0, i % 7 == 3) << ids[i];
  auto cached = extract(spec_, r, stored, &*cache);
  auto computed = extract(spec_, r, (*store)->query(r));
  ASSERT_TRUE(cached && computed);
  EXPECT_EQ(cached->dense, computed->dense);
  for (std::size_t k = 0; k < cached->bags.size(); ++k) EXPECT_EQ(cached->bags[k].indices, computed->bags[k].indices) << k;
}

// Filled as requests go (the Redis store's case): what a request extracted
// is found by the next, until it expires; a full cache starts over, and its
// generation says so.
TEST_F(Extraction, AFilledItemCacheGivesWhatWasExtractedUntilItExpires) {
  using Clock = ItemCache::Clock;
  ItemCache cache = ItemCache::empty(spec_, 40);
  const Request first = request({"i1", "i2", "not-stored"});
  auto computed = extract(spec_, first, store_->query(first));
  ASSERT_TRUE(computed);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < first.items.size(); ++i) cache.put(first.items[i].id, *computed, i, t0 + std::chrono::seconds(10));

  Request next = request({"i3", "not-stored", "i1", "i2"});
  next.items[3].features["price"] = 3.0;  // inline: extracted afresh
  std::vector<std::int64_t> rows(next.items.size(), -1);
  cache.find_rows(next, rows, t0 + std::chrono::seconds(1));
  EXPECT_EQ(rows[0], -1);
  EXPECT_GE(rows[1], 0);
  EXPECT_GE(rows[2], 0);
  EXPECT_EQ(rows[3], -1);
  StoredFeatures stored = store_->query(next);
  stored.cached_rows = rows;
  auto from_cache = extract(spec_, next, stored, &cache);
  auto fresh = extract(spec_, next, store_->query(next));
  ASSERT_TRUE(from_cache && fresh);
  EXPECT_EQ(from_cache->dense, fresh->dense);
  for (std::size_t k = 0; k < fresh->bags.size(); ++k) EXPECT_EQ(from_cache->bags[k].indices, fresh->bags[k].indices) << k;

  // Expired: missed, and found again once put anew.
  std::vector<std::int64_t> late(next.items.size(), -1);
  cache.find_rows(next, late, t0 + std::chrono::seconds(11));
  EXPECT_EQ(late, std::vector<std::int64_t>(next.items.size(), -1));
  cache.put("i1", *computed, 0, t0 + std::chrono::seconds(20));
  cache.find_rows(next, late, t0 + std::chrono::seconds(11));
  EXPECT_GE(late[2], 0);
  EXPECT_NE(late[2], rows[2]);  // the new row, past the expired one

  // Full: every row goes, and the generation changes.
  const auto generation = cache.generation();
  for (int i = 0; i < 40; ++i) cache.put("x" + std::to_string(i), *computed, 0, t0 + std::chrono::seconds(30));
  EXPECT_NE(cache.generation(), generation);
  std::vector<std::int64_t> after(next.items.size(), -1);
  cache.find_rows(next, after, t0);
  EXPECT_EQ(after, std::vector<std::int64_t>(next.items.size(), -1));
}

// The Redis store's steady state: the same items fetched again each time
// they expire. The cache holds about the unexpired rows, not every refresh
// since it began (found by bench/soak.sh: a replica's memory grew with each
// TTL until the bound of 262,144 rows), and what it keeps is still right.
TEST_F(Extraction, AnItemCacheRefreshedOverAndOverHoldsAboutItsUnexpiredRows) {
  using Clock = ItemCache::Clock;
  ItemCache cache = ItemCache::empty(spec_, 1u << 18);
  std::vector<std::string> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(i % 2 ? "i1" : "i2");  // stored items, under 300 ids
  for (int i = 0; i < 300; ++i) ids[static_cast<std::size_t>(i)] += "#" + std::to_string(i);
  const Request r = request({"i1", "i2", "i3"});
  auto computed = extract(spec_, r, store_->query(r));
  ASSERT_TRUE(computed);
  const auto t0 = Clock::now();
  const auto generation = cache.generation();
  std::size_t most = 0;
  for (int round = 0; round < 100; ++round) {  // 30,000 puts, 300 rows unexpired at any time
    const auto now = t0 + std::chrono::seconds(11 * round);
    for (std::size_t k = 0; k < ids.size(); ++k) cache.put(ids[k], *computed, k % 3, now + std::chrono::seconds(10), now);
    most = std::max(most, cache.items());
  }
  EXPECT_LE(most, 4096u + 300u);
  EXPECT_NE(cache.generation(), generation);
  // Every id of the last round found, extracted as it was put.
  const Request last = request(ids);
  std::vector<std::int64_t> rows(ids.size(), -1);
  cache.find_rows(last, rows, t0 + std::chrono::seconds(11 * 99 + 1));
  for (std::size_t k = 0; k < ids.size(); ++k) ASSERT_GE(rows[k], 0) << ids[k];
  StoredFeatures stored = store_->query(last);
  stored.cached_rows = rows;
  auto from_cache = extract(spec_, last, stored, &cache);
  ASSERT_TRUE(from_cache) << from_cache.error().message;
  const std::size_t width = computed->dense_width;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const auto row = computed->dense.begin() + static_cast<std::ptrdiff_t>((k % 3) * width);
    EXPECT_TRUE(std::equal(row, row + static_cast<std::ptrdiff_t>(width),
                           from_cache->dense.begin() + static_cast<std::ptrdiff_t>(k * width)))
        << ids[k];
  }
  // Expired rows are not found after they were dropped either.
  std::vector<std::int64_t> later(ids.size(), -1);
  cache.find_rows(last, later, t0 + std::chrono::seconds(11 * 99 + 10));
  EXPECT_EQ(later, std::vector<std::int64_t>(ids.size(), -1));
}

TEST_F(Extraction, CachedRowsWithoutTheirCacheAreRefused) {
  auto cache = build_cache(spec_, *store_);
  ASSERT_TRUE(cache.has_value());
  const Request r = request({"i1"});
  auto batch = extract(spec_, r, store_->query(r, &*cache));
  ASSERT_FALSE(batch.has_value());
  EXPECT_EQ(batch.error().code, Error::Code::kInternal);
}

TEST_F(Extraction, AStoreValueTheModelCannotReadFailsTheCacheBuild) {
  auto bad = feature_store::Entities::parse(R"({"kind": "item", "id": "i9", "features": {"price": "cheap"}})", "s.jsonl");
  ASSERT_TRUE(bad.has_value());
  auto cache = build_cache(spec_, **bad);
  ASSERT_FALSE(cache.has_value());
  EXPECT_NE(cache.error().message.find("feature store item 'i9' price: want a number"), std::string::npos)
      << cache.error().message;
}

TEST_F(Extraction, QueryIsTheStoreLookupAlone) {
  const auto stored = store_->query(request({"i1", "missing"}));
  EXPECT_EQ(stored.user, store_->user("u1"));
  ASSERT_EQ(stored.items.size(), 2u);
  EXPECT_EQ(stored.items[0], store_->item("i1"));
  EXPECT_EQ(stored.items[1], nullptr);
}

TEST(FeatureStore, LoadsUsersAndItems) {
  auto store = feature_store::Entities::load(testing::fixtures_dir() / "features/store.jsonl");
  ASSERT_TRUE(store.has_value()) << store.error().message;
  EXPECT_EQ((*store)->users(), 2u);
  EXPECT_EQ((*store)->items(), 3u);
  ASSERT_NE((*store)->user("2"), nullptr);
  EXPECT_EQ(std::get<double>((*store)->user("2")->at("age")), 55.0);
  EXPECT_EQ((*store)->item("zzz"), nullptr);
}

}  // namespace
}  // namespace numaserve::features
