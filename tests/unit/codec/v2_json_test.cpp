#include "codec/v2_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <limits>

namespace numaserve::codec {
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
  auto parsed = parse_infer_request(body.dump(), std::nullopt, spec(), {});
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed->id, "q");
  EXPECT_EQ(parsed->batch.rows, 2u);
  EXPECT_EQ(parsed->batch.dense, (std::vector<float>{1.5, 2.5}));
  EXPECT_EQ(parsed->batch.bags[0].indices, (std::vector<std::int64_t>{3, 4, 9}));
  EXPECT_EQ(parsed->batch.bags[0].offsets, (std::vector<std::int64_t>{0, 1}));
}

TEST(V2, ParametersCarryAPriorityAndATimeoutBesideTheCodecsOwn) {
  json body = request({{1.5}, {2.5}}, {3, 4}, {0, 1});
  body["parameters"] = {{"priority", 2}, {"timeout", 1000}, {"binary_data_output", true}, {"sequence_id", "s"}};
  auto parsed = parse_infer_request(body.dump(), std::nullopt, spec(), {});
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed->scheduling.priority, 2);
  EXPECT_EQ(parsed->scheduling.timeout_us, 1000);
  EXPECT_TRUE(parsed->binary_output);
  body["parameters"] = {{"priority", 1.5}};
  parsed = parse_infer_request(body.dump(), std::nullopt, spec(), {});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "parameters.priority");
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
    auto parsed = parse_infer_request(c.body.dump(), std::nullopt, spec(), {});
    ASSERT_FALSE(parsed.has_value()) << c.body.dump();
    EXPECT_EQ(parsed.error().field, c.field) << c.body.dump() << ": " << parsed.error().message;
  }
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// What Triton's clients send by default: a JSON header whose inputs say
// binary_data_size, then each one's raw bytes in the inputs' order. The
// same tensors as JSON values make the same batch.
TEST(V2, BinaryTensorDataReadsAsJsonDoes) {
  json header = request({1.5, 2.5}, {3, 4, 9}, {0, 1});
  header["inputs"][0].erase("data");
  header["inputs"][0]["parameters"] = {{"binary_data_size", 8}};
  header["inputs"][2].erase("data");
  header["inputs"][2]["parameters"] = {{"binary_data_size", 16}};
  header["parameters"] = {{"binary_data_output", true}};
  const std::string text = header.dump();
  const std::string body = text + bytes_of(std::vector<float>{1.5, 2.5}) + bytes_of(std::vector<std::int64_t>{0, 1});
  auto parsed = parse_infer_request(body, text.size(), spec(), {});
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  auto as_json = parse_infer_request(request({1.5, 2.5}, {3, 4, 9}, {0, 1}).dump(), std::nullopt, spec(), {});
  ASSERT_TRUE(as_json.has_value());
  EXPECT_EQ(parsed->batch.dense, as_json->batch.dense);
  EXPECT_EQ(parsed->batch.bags[0].indices, as_json->batch.bags[0].indices);
  EXPECT_EQ(parsed->batch.bags[0].offsets, as_json->batch.bags[0].offsets);
  EXPECT_TRUE(parsed->binary_output);
  EXPECT_FALSE(as_json->binary_output);

  // The score output's own binary_data overrides the request's.
  header["outputs"] = {{{"name", "score"}, {"parameters", {{"binary_data", false}}}}};
  const std::string overridden = header.dump();
  parsed = parse_infer_request(overridden + body.substr(text.size()), overridden.size(), spec(), {});
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_FALSE(parsed->binary_output);
}

TEST(V2, BadBinaryTensorDataNamesTheField) {
  json header = request({1, 2}, {3}, {0, 0});
  header["inputs"][0].erase("data");
  header["inputs"][0]["parameters"] = {{"binary_data_size", 8}};
  const std::string text = header.dump();
  const std::string floats = bytes_of(std::vector<float>{1, 2});
  struct Case {
    std::string body;
    std::optional<std::size_t> json_length;
    std::string field;
  };
  const std::vector<Case> cases = {
      {text + floats, std::nullopt, "body"},  // bytes after the JSON without the header saying where it ends
      {text, text.size(), "inputs[0].parameters.binary_data_size"},  // fewer bytes than it says
      {text + floats.substr(0, 6), text.size(), "inputs[0].parameters.binary_data_size"},
      {text + floats + "xx", text.size(), "Inference-Header-Content-Length"},  // bytes no input takes
      {text, text.size() + 1, "Inference-Header-Content-Length"},  // past the body
      {text.substr(0, 10), 10, "body"},  // the header cuts the JSON
  };
  for (const auto& c : cases) {
    auto parsed = parse_infer_request(c.body, c.json_length, spec(), {});
    ASSERT_FALSE(parsed.has_value()) << c.field;
    EXPECT_EQ(parsed.error().field, c.field) << parsed.error().message;
  }
  // Without the header, binary_data_size names what is missing.
  auto parsed = parse_infer_request(text, std::nullopt, spec(), {});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "inputs[0].parameters.binary_data_size");
  EXPECT_NE(parsed.error().message.find("Inference-Header-Content-Length"), std::string::npos) << parsed.error().message;
  // 6 bytes are not whole FP32 values; data and binary_data_size together are refused.
  json both = request({1, 2}, {3}, {0, 0});
  both["inputs"][0]["parameters"] = {{"binary_data_size", 8}};
  parsed = parse_infer_request(both.dump() + floats, both.dump().size(), spec(), {});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "inputs[0].data");
  json odd = header;
  odd["inputs"][0]["parameters"]["binary_data_size"] = 6;
  parsed = parse_infer_request(odd.dump() + floats.substr(0, 6), odd.dump().size(), spec(), {});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_NE(parsed.error().message.find("whole number"), std::string::npos) << parsed.error().message;
  // A non-finite float is refused in binary as in JSON.
  parsed = parse_infer_request(text + bytes_of(std::vector<float>{1, std::numeric_limits<float>::infinity()}), text.size(),
                               spec(), {});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "inputs[0].data[1]");
}

TEST(V2, ElementCountsAreBoundedBeforeAllocating) {
  api::RequestLimits limits;
  limits.max_items = 4;
  auto parsed = parse_infer_request(request({1, 2}, {3}, {0, 0}, {1000000000, 1}).dump(), std::nullopt, spec(), limits);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().field, "inputs[0].shape");
}

TEST(V2, ResponseCarriesTheScores) {
  const auto reply = v2_infer_response(spec(), "q", {0.25f, 0.5f});
  EXPECT_FALSE(reply.json_length.has_value());
  const json body = json::parse(reply.body);
  EXPECT_EQ(body["model_name"], "m");
  EXPECT_EQ(body["model_version"], "2");
  EXPECT_EQ(body["id"], "q");
  EXPECT_EQ(body["outputs"][0]["shape"], json::array({2}));
  EXPECT_EQ(body["outputs"][0]["data"], json::array({0.25, 0.5}));

  // Binary: the JSON says the size, the scores' bytes follow it.
  const auto binary = v2_infer_response(spec(), "q", {0.25f, 0.5f}, true);
  ASSERT_TRUE(binary.json_length.has_value());
  const json head = json::parse(binary.body.substr(0, *binary.json_length));
  EXPECT_FALSE(head["outputs"][0].contains("data"));
  EXPECT_EQ(head["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_EQ(binary.body.substr(*binary.json_length), bytes_of(std::vector<float>{0.25f, 0.5f}));
}

}  // namespace
}  // namespace numaserve::codec
