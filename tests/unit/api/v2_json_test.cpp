#include "api/v2_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace numaserve::api {
namespace {

using nlohmann::json;

features::ModelSpec spec() {
  return features::parse_model_spec(R"(name: m
version: "2"
tables: {tag: 10}
features:
  - {name: price, source: item, kind: numeric}
  - {name: tags, source: item, kind: id_list, table: tag}
)",
                                    "model.yaml")
      .value();
}

json tensor(const std::string& name, const char* type, json shape, json data) {
  return {{"name", name}, {"datatype", type}, {"shape", std::move(shape)}, {"data", std::move(data)}};
}

json request(json dense_data, json indices, json offsets, json dense_shape = {2, 1}) {
  return {{"id", "q"},
          {"inputs",
           {tensor("dense", "FP32", std::move(dense_shape), std::move(dense_data)),
            tensor("item_tags_indices", "INT64", {indices.size()}, indices),
            tensor("item_tags_offsets", "INT64", {offsets.size()}, offsets)}}};
}

TEST(V2, MetadataNamesEveryInput) {
  const json meta = json::parse(v2_model_metadata(spec()));
  EXPECT_EQ(meta["name"], "m");
  EXPECT_EQ(meta["versions"], json::array({"2"}));
  EXPECT_EQ(meta["inputs"][0], json({{"name", "dense"}, {"datatype", "FP32"}, {"shape", {-1, 1}}}));
  EXPECT_EQ(meta["inputs"][1]["name"], "item_tags_indices");
  EXPECT_EQ(meta["inputs"][2]["name"], "item_tags_offsets");
  EXPECT_EQ(meta["outputs"][0]["name"], "score");
}

TEST(V2, InferRequestBecomesABatch) {
  // Nested data is accepted as well as flat; the body may name its model.
  json body = request({{1.5}, {2.5}}, {3, 4, 9}, {0, 1});
  body["model_name"] = "m";
  body["model_version"] = "2";
  auto parsed = parse_infer_request(body.dump(), spec(), {});
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed->id, "q");
  EXPECT_EQ(parsed->batch.rows, 2u);
  EXPECT_EQ(parsed->batch.dense, (std::vector<float>{1.5, 2.5}));
  EXPECT_EQ(parsed->batch.bags[0].indices, (std::vector<std::int64_t>{3, 4, 9}));
  EXPECT_EQ(parsed->batch.bags[0].offsets, (std::vector<std::int64_t>{0, 1}));
}

TEST(V2, BadTensorsNameTheField) {
  struct Case {
    json body;
    std::string field;
  };
  const std::vector<Case> cases = {
      {request({1, 2}, {3, 10}, {0, 1}), "inputs[1].data[1]"},        // index past the table
      {request({1, 2}, {3, -1}, {0, 1}), "inputs[1].data[1]"},        // negative index
      {request({1, 2}, {3, 4}, {1, 1}), "inputs[2].data[0]"},         // offsets must start at 0
      {request({1, 2}, {3, 4}, {0, 3}), "inputs[2].data[1]"},         // past the indices
      {request({1, 2}, {3, 4}, {0}), "inputs[2].shape"},              // one offset per row
      {request({1, 2, 3}, {3}, {0, 0}), "inputs[0].data"},            // data does not fill the shape
      {request({1, 2}, {3}, {0, 0}, {1, 2}), "inputs[0].shape"},      // wrong dense width
      {request({1, "x"}, {3}, {0, 0}), "inputs[0].data[1]"},          // not a number
      {request({1, 2}, {3.5}, {0, 0}), "inputs[1].data[0]"},          // not an integer
      {json{{"inputs", {tensor("dense", "FP64", {1, 1}, {1})}}}, "inputs[0].datatype"},
      {json{{"inputs", {tensor("nope", "FP32", {1, 1}, {1})}}}, "inputs[0].name"},
      {json{{"inputs", {tensor("dense", "FP32", {1, 1}, {1})}}}, "inputs"},  // bags missing
      {json{{"inputs", json::array()}, {"extra", 1}}, "extra"},
      // Keys a path cannot show plainly are quoted (fuzz_infer_body: {"": 99} named no field).
      {json{{"inputs", json::array()}, {"", 1}}, R"([""])"},
      {json{{"inputs", {json{{"name", "dense"}, {"a.b", 1}}}}}, R"(inputs[0]["a.b"])"},
      {json::array(), "body"},
      // The body may repeat the path's model (KServe's client does), but not another.
      {json{{"model_name", "other"}, {"inputs", json::array()}}, "model_name"},
      {json{{"model_version", "1"}, {"inputs", json::array()}}, "model_version"},
      {json{{"model_name", 7}, {"inputs", json::array()}}, "model_name"},
  };
  for (const auto& c : cases) {
    auto parsed = parse_infer_request(c.body.dump(), spec(), {});
    ASSERT_FALSE(parsed.has_value()) << c.body.dump();
    EXPECT_EQ(parsed.error().field, c.field) << c.body.dump() << ": " << parsed.error().message;
  }
}

// What Triton's clients send by default: a JSON header whose inputs say
// binary_data_size, then the raw bytes. Refused saying what to change, and
// the bytes after a NUL are not silently ignored (nlohmann stops at a NUL).
TEST(V2, BinaryTensorDataIsRefusedSayingWhatToDo) {
  json header = request({1, 2}, {3}, {0, 0});
  header["inputs"][0].erase("data");
  header["inputs"][0]["parameters"] = {{"binary_data_size", 8}};
  auto parsed = parse_infer_request(header.dump(), spec(), {});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "inputs[0].parameters.binary_data_size");
  EXPECT_NE(parsed.error().message.find("binary_data=False"), std::string::npos) << parsed.error().message;

  const std::string trailing = request({1, 2}, {3}, {0, 0}).dump() + std::string("\0\0\0\x01", 4);
  parsed = parse_infer_request(trailing, spec(), {});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "body");
  EXPECT_NE(parsed.error().message.find("not valid JSON"), std::string::npos) << parsed.error().message;
}

TEST(V2, ElementCountsAreBoundedBeforeAllocating) {
  RequestLimits limits;
  limits.max_items = 4;
  auto parsed = parse_infer_request(request({1, 2}, {3}, {0, 0}, {1000000000, 1}).dump(), spec(), limits);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "inputs[0].shape");
}

TEST(V2, ResponseCarriesTheScores) {
  const json body = json::parse(v2_infer_response(spec(), "q", {0.25f, 0.5f}));
  EXPECT_EQ(body["model_name"], "m");
  EXPECT_EQ(body["model_version"], "2");
  EXPECT_EQ(body["id"], "q");
  EXPECT_EQ(body["outputs"][0]["shape"], json::array({2}));
  EXPECT_EQ(body["outputs"][0]["data"], json::array({0.25, 0.5}));
}

}  // namespace
}  // namespace numaserve::api
