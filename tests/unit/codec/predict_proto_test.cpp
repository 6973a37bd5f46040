// Ranking.Predict's request read by hand (predict_proto.h): what protobuf's
// generated code writes reads back the same, protobuf's merge and skip
// rules hold, and every refusal names its field. The fuzz target
// grpc_messages checks it against the generated parser on arbitrary bytes.
#include "codec/predict_proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "codec/grpc_codec.h"

namespace numaserve::codec {
namespace {

// The wire, written by hand for what the generated code would never write.
std::string varint(std::uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out += static_cast<char>(0x80 | (v & 0x7F));
  out += static_cast<char>(v);
  return out;
}
std::string tag(int field, int wire) { return varint(static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire)); }
std::string bytes(int field, const std::string& value) { return tag(field, 2) + varint(value.size()) + value; }
std::string number(int field, double value) {
  std::string out = tag(field, 1);
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
  return out;
}
std::string entry(const std::string& key, const std::string& value) { return bytes(1, key) + bytes(2, value); }
// Entity: id 1, features 2 (entries); FeatureValue: number 1, id 2, ids 3 (IdList: ids 1).
std::string entity(const std::string& id, const std::string& features = "") { return bytes(1, id) + features; }
std::string feature(const std::string& key, const std::string& value) { return bytes(2, entry(key, value)); }
// PredictRequest: model 1, version 2, request_id 3, user 4, context 5 (entries), items 6.
std::string minimal() { return bytes(4, entity("u")) + bytes(6, entity("i1")); }

Result<PredictRequest> parse(const std::string& message, api::RequestLimits limits = {}) {
  return parse_predict_proto(message, limits);
}

void expect_refused(const std::string& message, const std::string& field, const std::string& says = "",
                    api::RequestLimits limits = {}) {
  const auto got = parse(message, limits);
  ASSERT_FALSE(got) << "taken";
  EXPECT_EQ(got.error().field, field) << got.error().message;
  EXPECT_NE(got.error().message.find(says), std::string::npos) << got.error().message;
}

TEST(PredictProto, ReadsBackWhatProtobufWrites) {
  PredictRequest request;
  request.model = "ranker_a";
  request.version = "stable";
  request.request_id = "r-1";
  request.features.user = {"u3", {{"age", 31.5}, {"country", std::string("de")}, {"recent", std::vector<std::string>{"i1", "i2"}}}};
  request.features.context = {{"hour", 9.0}, {"device", std::string("ios")}, {"empty", std::vector<std::string>{}}};
  request.features.items = {{"i1", {}}, {"i7", {{"price", -0.25}}}, {"ü-ß", {{"tags", std::vector<std::string>{"a", ""}}}}};
  for (int k = 0; k < 200; ++k) request.features.items.push_back({"item-" + std::to_string(k), {}});
  const auto got = parse(grpc::predict_message(request));
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->model, request.model);
  EXPECT_EQ(got->version, "stable");
  EXPECT_EQ(got->request_id, "r-1");
  EXPECT_EQ(got->features.user.id, "u3");
  EXPECT_EQ(got->features.user.features, request.features.user.features);
  EXPECT_EQ(got->features.context, request.features.context);
  ASSERT_EQ(got->features.items.size(), request.features.items.size());
  for (std::size_t i = 0; i < request.features.items.size(); ++i) {
    EXPECT_EQ(got->features.items[i].id, request.features.items[i].id);
    EXPECT_EQ(got->features.items[i].features, request.features.items[i].features);
  }
}

TEST(PredictProto, APriorityIsReadAsProtobufReadsAUint32AndZeroIsTheDefault) {
  PredictRequest request;
  request.features.user = {"u", {}};
  request.features.items = {{"i1", {}}};
  request.scheduling.priority = 2;
  auto got = parse(grpc::predict_message(request));
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->scheduling.priority, 2);
  EXPECT_EQ(got->scheduling.priority_field, "priority");
  EXPECT_FALSE(parse(minimal())->scheduling.priority.has_value());
  EXPECT_FALSE(parse(minimal() + tag(7, 0) + varint(0))->scheduling.priority.has_value());
  EXPECT_EQ(parse(minimal() + tag(7, 0) + varint((1ull << 32) + 3))->scheduling.priority, 3);  // the low 32 bits
}

TEST(PredictProto, FollowsProtobufsMergeRules) {
  // The user given twice is one user: the last id, the features of both.
  // A key given twice takes its last entry; a oneof its last member; id
  // lists one after another are merged. Unset model: none.
  const std::string message = bytes(4, entity("first", feature("a", number(1, 1)))) +
                              bytes(4, entity("second", feature("b", bytes(2, "x")))) +
                              bytes(5, entry("k", number(1, 1))) + bytes(5, entry("k", bytes(2, "last"))) +
                              bytes(5, entry("oneof", number(1, 2) + bytes(2, "id wins"))) +
                              bytes(5, entry("ids", bytes(3, bytes(1, "a")) + bytes(3, bytes(1, "b")))) +
                              bytes(1, "m") + bytes(1, "") + bytes(6, entity("i1"));
  const auto got = parse(message);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_FALSE(got->model) << "an empty model given last is no model";
  EXPECT_EQ(got->features.user.id, "second");
  EXPECT_EQ(got->features.user.features, (features::Features{{"a", 1.0}, {"b", std::string("x")}}));
  EXPECT_EQ(got->features.context, (features::Features{{"k", std::string("last")},
                                                       {"oneof", std::string("id wins")},
                                                       {"ids", std::vector<std::string>{"a", "b"}}}));
}

TEST(PredictProto, SkipsUnknownFieldsAndKnownNumbersOfAnotherWireType) {
  std::string group = tag(99, 3) + tag(1, 0) + varint(5) + tag(2, 3) + tag(2, 4) + tag(99, 4);
  std::string fixed32 = tag(98, 5) + "abcd";
  const std::string message = tag(1, 0) + varint(7) +  // model as a varint: unknown, so no model
                              tag(50, 0) + varint(std::numeric_limits<std::uint64_t>::max()) + number(51, 1.0) +
                              bytes(52, "anything") + fixed32 + group + minimal() +
                              bytes(5, entry("k", tag(1, 2) + varint(0) + number(1, 4)));  // number as bytes: skipped
  const auto got = parse(message);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_FALSE(got->model);
  EXPECT_EQ(got->features.context, (features::Features{{"k", 4.0}}));
}

TEST(PredictProto, BytesThatAreNotTheMessageAreRefusedWithWhereTheyStop) {
  const std::string whole = minimal();
  expect_refused(whole.substr(0, whole.size() - 1), "message", "not a valid numaserve.v1.PredictRequest message");
  expect_refused(tag(0, 2) + whole, "message", "at byte 0");
  expect_refused(whole + tag(7, 4), "message", "an end-group tag");
  expect_refused(whole + tag(7, 6), "message", "unknown field");
  expect_refused(whole + tag(7, 3) + tag(8, 4), "message");  // a group ended by another's tag
  expect_refused(whole + bytes(6, entity("bad \xC0\xAF")), "message", "not UTF-8");
  expect_refused(whole + bytes(6, entity("\xED\xA0\x80")), "message", "not UTF-8");  // a surrogate
  expect_refused(whole + tag(9, 0) + std::string(10, '\xFF') + '\x01', "message");  // an 11-byte varint
  std::string deep;
  for (int i = 0; i < 101; ++i) deep += tag(9, 3);
  for (int i = 0; i < 101; ++i) deep += tag(9, 4);
  expect_refused(whole + deep, "message");
  std::string allowed;
  for (int i = 0; i < 99; ++i) allowed += tag(9, 3);
  for (int i = 0; i < 99; ++i) allowed += tag(9, 4);
  EXPECT_TRUE(parse(whole + allowed)) << "groups 99 deep are within protobuf's limit";
  const std::string valid = "\xF4\x8F\xBF\xBF";  // U+10FFFF
  EXPECT_TRUE(parse(whole + bytes(6, entity("caf\xC3\xA9" + valid))));
}

TEST(PredictProto, RefusalsNameTheirFieldAsThePredictJsonOnesDo) {
  expect_refused(bytes(6, entity("i")), "user", "required");
  expect_refused(bytes(4, "") + bytes(6, entity("i")), "user.id", "required");
  expect_refused(bytes(4, entity("u")), "items", "empty");
  expect_refused(minimal() + bytes(6, entity("")), "items[1].id", "required");
  expect_refused(minimal() + bytes(6, entity("i2", feature("p", number(1, std::numeric_limits<double>::infinity())))),
                 "items[1].features.p", "finite");
  expect_refused(minimal() + bytes(5, entry("hour", "")), "context.hour", "a number, an id or a list");
  EXPECT_TRUE(parse(minimal() + bytes(5, entry("hour", "")) + bytes(5, entry("hour", number(1, 9)))))
      << "a key's later entry replaces a valueless one";
  api::RequestLimits limits;
  limits.max_items = 2;
  limits.max_features_per_entity = 1;
  limits.max_list_length = 1;
  EXPECT_TRUE(parse(minimal() + bytes(6, entity("i2")), limits));
  expect_refused(minimal() + bytes(6, entity("i2")) + bytes(6, entity("i3")), "items", "the limit is 2", limits);
  expect_refused(bytes(4, entity("u", feature("a", number(1, 1)) + feature("b", number(1, 1)))) + bytes(6, entity("i")),
                 "user.features", "the limit is 1", limits);
  expect_refused(minimal() + bytes(5, entry("l", bytes(3, bytes(1, "a") + bytes(1, "b")))), "context.l", "the limit is 1",
                 limits);
}

// Within the body limit a message can hold hundreds of thousands of tiny
// map entries or ids: refused as over the limits, without keeping them
// (valueless entries were once looked up one by one in a list: quadratic).
TEST(PredictProto, MessagesFarPastTheLimitsAreRefusedWithoutKeepingThem) {
  std::string many_keys, many_unset, many_ids;
  for (int k = 0; k < 200000; ++k) {
    many_keys += bytes(5, entry("k" + std::to_string(k), number(1, k)));
    many_unset += bytes(5, bytes(1, "u" + std::to_string(k)));
    many_ids += bytes(1, "i");
  }
  expect_refused(minimal() + many_keys, "context", "features; the limit is");
  expect_refused(minimal() + many_unset, "context", "features; the limit is");
  expect_refused(minimal() + bytes(5, entry("l", bytes(3, many_ids))), "context.l", "ids; the limit is");
}

}  // namespace
}  // namespace numaserve::codec
