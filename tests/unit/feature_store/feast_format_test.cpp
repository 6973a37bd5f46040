// Feast's Redis online format: keys, fields and values byte for byte as
// Feast's Python writes them (the goldens are written out by hand from
// key_encoding_utils.py and Value.proto; the service test cross-checks
// against a Python writer too).
#include "feature_store/feast_format.h"

#include <gtest/gtest.h>

#include "features/model_spec.h"

namespace numaserve::feature_store {
namespace {

using features::FeatureValue;
using features::Kind;
using namespace std::string_literals;

std::string le32(std::uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

TEST(FeastKey, StringJoinKeyIsVersionThree) {
  const features::EntityMapping user{"user", "user_id", false};
  const std::string want = le32(1) + le32(2) + le32(7) + "user_id" + le32(2) + le32(2) + "u1";
  EXPECT_EQ(*entity_key(user, "u1"), want);
}

TEST(FeastKey, Int64JoinKeyIsEightLittleEndianBytes) {
  const features::EntityMapping item{"item", "item_id", true};
  const std::string value = "\x2a\x00\x00\x00\x00\x00\x00\x00"s;
  EXPECT_EQ(*entity_key(item, "42"), le32(1) + le32(2) + le32(7) + "item_id" + le32(4) + le32(8) + value);
  const std::string minus_one(8, '\xff');
  EXPECT_EQ(entity_key(item, "-1")->substr(27), minus_one);
  auto bad = entity_key(item, "i42");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("not an int64"), std::string::npos);
}

TEST(FeastKey, JoinKeyLengthCountsCodePointsAsFeastDoes) {
  // Feast writes len(str) of the join key's name; for "prénom" that is 6, its UTF-8 is 7 bytes.
  const features::EntityMapping e{"v", "pr\xc3\xa9nom", false};
  EXPECT_EQ(entity_key(e, "x")->substr(8, 4), le32(6));
}

TEST(FeastField, MurmurHashOfViewAndFeature) {
  // Independent values: MurmurHash3_x86_32 from its reference definition
  // (the service test's Python writer checks its own on "foo" -> 0xf6a5c420).
  EXPECT_EQ(feature_field("", "").size(), 4u);
  EXPECT_NE(feature_field("user", "age"), feature_field("user", "ages"));
  EXPECT_EQ(timestamp_field("user"), "_ts:user");
}

TEST(FeastValue, RoundTripsWhatTheLoaderWrites) {
  for (const FeatureValue& v : {FeatureValue(3.25), FeatureValue("c8"s), FeatureValue(std::vector<std::string>{"a", "b"}),
                                FeatureValue(std::vector<std::string>{})}) {
    const Kind kind = std::holds_alternative<double>(v) ? Kind::kNumeric : std::holds_alternative<std::string>(v) ? Kind::kId : Kind::kIdList;
    auto back = decode_value(encode_value(v), kind);
    ASSERT_TRUE(back) << back.error().message;
    ASSERT_TRUE(back->has_value());
    EXPECT_EQ(**back, v);
  }
}

TEST(FeastValue, DecodesEveryNumericAndIdMemberAsExtractionWouldReadIt) {
  // Hand-encoded feast.types.Value bytes: field number << 3 | wire type.
  const std::string int64_val = "\x20\x2a"s;                        // int64_val = 42
  const std::string int32_val = "\x18\x07"s;                        // int32_val = 7
  const std::string float_val = "\x35\x00\x00\x20\x40"s;            // float_val = 2.5
  const std::string bool_val = "\x38\x01"s;                         // bool_val = true
  const std::string string_val = "\x12\x02u7"s;                     // string_val = "u7"
  const std::string int64_list = "\x72\x04\x0a\x02\x01\x02"s;       // int64_list_val {1, 2}
  const std::string double_val = "\x29\x00\x00\x00\x00\x00\x00\x45\x40"s;  // double_val = 42.0
  EXPECT_EQ(**decode_value(int64_val, Kind::kNumeric), FeatureValue(42.0));
  EXPECT_EQ(**decode_value(int32_val, Kind::kNumeric), FeatureValue(7.0));
  EXPECT_EQ(**decode_value(float_val, Kind::kNumeric), FeatureValue(2.5));
  EXPECT_EQ(**decode_value(bool_val, Kind::kNumeric), FeatureValue(1.0));
  EXPECT_EQ(**decode_value(int64_val, Kind::kId), FeatureValue("42"s));
  EXPECT_EQ(**decode_value(double_val, Kind::kId), FeatureValue("42"s));  // as the embedded store reads JSON 42
  EXPECT_EQ(**decode_value(string_val, Kind::kId), FeatureValue("u7"s));
  EXPECT_EQ(**decode_value(int64_list, Kind::kIdList), FeatureValue(std::vector<std::string>{"1", "2"}));
}

TEST(FeastValue, NullAndEmptyAreMissing) {
  EXPECT_FALSE(decode_value("", Kind::kNumeric)->has_value());
  EXPECT_FALSE(decode_value("\x98\x01\x00"s, Kind::kNumeric)->has_value());  // null_val = NULL
}

TEST(FeastValue, WrongTypesAndGarbageAreErrorsNotCrashes) {
  auto list_for_number = decode_value(encode_value(FeatureValue(std::vector<std::string>{"a"})), Kind::kNumeric);
  ASSERT_FALSE(list_for_number);
  EXPECT_EQ(list_for_number.error().message, "want a number, the store holds a list of strings");
  auto text_for_number = decode_value("\x12\x02u7"s, Kind::kNumeric);
  ASSERT_FALSE(text_for_number);
  EXPECT_NE(text_for_number.error().message.find("a string"), std::string::npos);
  EXPECT_FALSE(decode_value("\xff\xff\xff", Kind::kNumeric));    // not a protobuf
  EXPECT_FALSE(decode_value("\x12\x09u7"s, Kind::kId));          // length past the end
  EXPECT_FALSE(decode_value("\xa2\x01\x00"s, Kind::kNumeric));   // a map_val (20): not read
  EXPECT_FALSE(decode_value("\x29\x00\x00\x00\x00\x00\x00\xe0\x3f"s, Kind::kId));  // 0.5 is no id
}

TEST(FeastTimestamp, RoundTripsSecondsAndNanos) {
  const auto when = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000) + std::chrono::microseconds(250));
  EXPECT_EQ(*decode_timestamp(encode_timestamp(when)), when);
  EXPECT_EQ(encode_timestamp(std::chrono::system_clock::time_point(std::chrono::seconds(1))), "\x08\x01"s);
}

features::ModelSpec spec(const std::string& yaml) {
  auto parsed = features::parse_model_spec(yaml, "model.yaml");
  EXPECT_TRUE(parsed) << parsed.error().message;
  return *parsed;
}

const char* kModel = R"(
name: m
version: "1"
tables: {t: 10}
feature_store:
  project: shop
  item: {view: item_stats, join_key: sku, join_key_type: int64}
features:
  - {name: age, source: user, kind: numeric}
  - {name: id, source: item, kind: id, table: t}
  - {name: price, source: item, kind: numeric, view: prices, store_name: price_usd}
  - {name: tags, source: item, kind: id_list, table: t}
  - {name: hour, source: context, kind: numeric}
)";

TEST(FeastLayout, MapsFeaturesToViewsFromModelYaml) {
  const auto m = spec(kModel);
  auto layout = Layout::build({&m});
  ASSERT_TRUE(layout) << layout.error().message;
  const auto& item = layout->item();
  EXPECT_EQ(item.project, "shop");
  EXPECT_EQ(item.views, (std::vector<std::string>{"prices", "item_stats"}));
  ASSERT_EQ(item.fields.size(), 2u);  // "id" is the entity's own id, not stored
  EXPECT_EQ(item.fields[0].hash, feature_field("prices", "price_usd"));
  EXPECT_EQ(item.fields[1].hash, feature_field("item_stats", "tags"));
  EXPECT_EQ(item.hmget_fields().back(), "_ts:item_stats");
  EXPECT_EQ(*item.redis_key("9"), *entity_key(m.store.item, "9") + "shop");
  EXPECT_EQ(layout->user().mapping.join_key, "user_id");  // the default
  EXPECT_EQ(layout->user().views, std::vector<std::string>{"user"});
}

TEST(FeastLayout, DecodesWhatEncodeWroteAndDropsStaleViews) {
  const auto m = spec(kModel);
  const auto layout = *Layout::build({&m});
  const auto& item = layout.item();
  const features::Features written = {{"price", 12.5}, {"tags", std::vector<std::string>{"a"}}};
  const auto now = std::chrono::system_clock::now();
  const auto fields = Layout::encode(item, written, now - std::chrono::hours(2));
  Reply reply;
  for (const auto& want : item.hmget_fields()) {
    std::optional<std::string> got;
    for (const auto& [field, value] : fields) {
      if (field == want) got = value;
    }
    reply.push_back(got);
  }
  EXPECT_EQ(*Layout::decode(item, "9", reply, 0, now), written);
  EXPECT_TRUE(Layout::decode(item, "9", reply, 3600, now)->empty());  // both views two hours old
  EXPECT_EQ(*Layout::decode(item, "9", reply, 3 * 3600, now), written);

  reply[0] = "\xff\xff";
  auto bad = Layout::decode(item, "9", reply, 0, now);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("entity '9' feature price (view prices)"), std::string::npos) << bad.error().message;
}

TEST(FeastLayout, ModelsServedTogetherMustAgreeOnKeys) {
  const auto a = spec(kModel);
  auto b = a;
  b.name = "other";
  b.store.project = "elsewhere";
  auto layout = Layout::build({&a, &b});
  ASSERT_FALSE(layout);
  EXPECT_NE(layout.error().message.find("model other"), std::string::npos);
}

TEST(ModelSpecStore, RejectsUnknownKeysAndTypesWithTheLine) {
  auto bad = features::parse_model_spec("name: m\nversion: '1'\nfeature_store:\n  user: {join_key_type: uuid}\n"
                                        "features:\n  - {name: a, source: user, kind: numeric}\n",
                                        "model.yaml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("model.yaml line 4"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("feature_store.user.join_key_type"), std::string::npos);
  auto typo = features::parse_model_spec("name: m\nversion: '1'\nfeature_store: {projet: x}\n"
                                         "features:\n  - {name: a, source: user, kind: numeric}\n",
                                         "model.yaml");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("feature_store.projet: unknown key"), std::string::npos) << typo.error().message;
}

}  // namespace
}  // namespace numaserve::feature_store
