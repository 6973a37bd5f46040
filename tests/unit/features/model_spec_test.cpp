#include "features/model_spec.h"

#include <gtest/gtest.h>

#include <tuple>

#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve::features {
namespace {

Result<ModelSpec> parse(const std::string& yaml) { return parse_model_spec(yaml, "model.yaml"); }

TEST(ModelSpec, ReadsTheContract) {
  auto spec = parse_model_spec(read_text_file(testing::fixtures_dir() / "features/model.yaml").value(), "model.yaml");
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->name, "tiny_ranker");
  EXPECT_EQ(spec->version, "01");  // text, not the number 1
  EXPECT_EQ(spec->hash_seed, 7u);
  EXPECT_EQ(spec->tables.at("tag"), 64u);
  ASSERT_EQ(spec->features.size(), 7u);
  ASSERT_EQ(spec->dense_features().size(), 3u);
  EXPECT_EQ(spec->dense_features()[0]->name, "age");
  ASSERT_EQ(spec->sparse_features().size(), 4u);
  const FeatureSpec* price = spec->feature("price", Source::kItem);
  ASSERT_NE(price, nullptr);
  EXPECT_EQ(price->transform, Transform::kLog1p);
  EXPECT_EQ(price->clip_high, 5.0);
  EXPECT_EQ(std::get<std::string>(spec->feature("country", Source::kUser)->default_value), "unknown");
  EXPECT_EQ(spec->feature("price", Source::kUser), nullptr);
}

TEST(ModelSpec, ReadsThePrecisionAndItsDriftBound) {
  const std::string head = "name: m\nversion: \"1\"\ntables: {t: 10}\nfeatures:\n  - {name: a, source: item, kind: id, table: t}\n";
  auto fp32 = parse(head);
  ASSERT_TRUE(fp32) << fp32.error().message;
  EXPECT_EQ(fp32->precision, Precision::kFp32);  // the default
  EXPECT_EQ(fp32->precision_max_drift, kDefaultMaxDrift);
  auto bf16 = parse(head + "precision: bf16-if-available\nprecision_max_drift: 1e-3\n");
  ASSERT_TRUE(bf16) << bf16.error().message;
  EXPECT_EQ(bf16->precision, Precision::kBf16IfAvailable);
  EXPECT_EQ(bf16->precision_max_drift, 1e-3);
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {"precision: fp16\n", "model.yaml line 6: precision: want one of fp32, bf16, bf16-if-available"},
           {"precision_max_drift: 0\n", "model.yaml line 6: precision_max_drift: want a number > 0"},
           {"precision_max_drift: .nan\n", "precision_max_drift: want a number, not NaN"},
           {"precision_max_drift: tiny\n", "precision_max_drift: want a number"}}) {
    auto refused = parse(head + yaml);
    ASSERT_FALSE(refused) << yaml;
    EXPECT_NE(refused.error().message.find(message), std::string::npos) << refused.error().message;
    EXPECT_EQ(refused.error().field, yaml.substr(0, yaml.find(':')));
  }
  // Precision is not part of the feature contract: a new version may change it.
  EXPECT_TRUE(same_feature_contract(*fp32, *bf16));
}

TEST(ModelSpec, ReadsTheTablesShippedQuantized) {
  const std::string head =
      "name: m\nversion: \"1\"\ntables: {t: 10, u: 20}\nfeatures:\n  - {name: a, source: item, kind: id, table: t}\n";
  auto shipped = parse(head + "embedding_precision: int4\nquantized_tables: [u, t]\n");
  ASSERT_TRUE(shipped) << shipped.error().message;
  EXPECT_EQ(shipped->quantized_tables, (std::vector<std::string>{"u", "t"}));
  EXPECT_EQ(rowwise_bits(*shipped->embedding_precision), 4);
  EXPECT_TRUE(parse(head)->quantized_tables.empty());
  for (const auto& [yaml, field, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"embedding_precision: int8\nquantized_tables: [v]\n", "quantized_tables[0]", "'v' is not among tables"},
           {"embedding_precision: int8\nquantized_tables: [t, t]\n", "quantized_tables[1]", "'t' is listed twice"},
           {"embedding_precision: int8\nquantized_tables: t\n", "quantized_tables", "want a list of table names"},
           // The files' bits are embedding_precision's: written (not following precision), and rowwise.
           {"precision: int8\nquantized_tables: [t]\n", "quantized_tables", "needs embedding_precision int8 or int4"},
           {"embedding_precision: bf16\nquantized_tables: [t]\n", "quantized_tables", "needs embedding_precision int8 or int4"}}) {
    auto refused = parse(head + yaml);
    ASSERT_FALSE(refused) << yaml;
    EXPECT_EQ(refused.error().field, field) << yaml;
    EXPECT_NE(refused.error().message.find(message), std::string::npos) << refused.error().message;
  }
}

TEST(ModelSpec, ReadsThePriorityLevelOfRequestsNamingNone) {
  const std::string head = "name: m\nversion: \"1\"\ntables: {t: 10}\nfeatures:\n  - {name: a, source: item, kind: id, table: t}\n";
  EXPECT_EQ(parse(head)->priority, 0u);  // the server's default
  auto first = parse(head + "priority: 1\n");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->priority, 1u);
  for (const std::string value : {"0", "-1", "1.5", "high", "[1]"}) {
    auto refused = parse(head + "priority: " + value + "\n");
    ASSERT_FALSE(refused) << value;
    EXPECT_EQ(refused.error().field, "priority");
    EXPECT_NE(refused.error().message.find("model.yaml line 6: priority: want a priority level"), std::string::npos)
        << refused.error().message;
  }
  // A serving choice, not part of the feature contract: a new version may change it.
  EXPECT_TRUE(same_feature_contract(*parse(head), *first));
}

TEST(ModelSpec, ErrorsNameLineAndField) {
  const std::string head = "name: m\nversion: \"1\"\ntables: {t: 10}\nfeatures:\n";
  struct Case {
    std::string features;
    std::string expected;
  };
  for (const auto& c : std::vector<Case>{
           {"  - {name: a, source: item, kind: numerik}\n", "model.yaml line 5: features[0].kind: want one of id, id_list, numeric"},
           {"  - {name: a, source: shop, kind: numeric}\n", "features[0].source: want one of user, context, item"},
           {"  - {name: a, source: item, kind: id, table: nope}\n", "features[0].table: want one of the model's tables"},
           {"  - {name: a, source: item, kind: numeric, transform: standardize, std: 0}\n", "features[0].std: standardize needs std > 0"},
           {"  - {name: a, source: item, kind: numeric, clip: [5, 1]}\n", "features[0].clip: low is above high"},
           {"  - {name: a, source: item, kind: numeric, colour: red}\n", "features[0].colour: unknown key"},
           {"  - {name: a, source: item, kind: id, table: t, max_len: 2}\n", "features[0].max_len: only id_list features have one"},
           {"  - {name: a, source: item, kind: numeric}\n  - {name: a, source: item, kind: numeric}\n",
            "model.yaml line 6: features[1].name: 'a' is declared twice for source item"},
           {"  - {name: a, source: item, kind: numeric, default: lots}\n", "features[0].default: want a number"},
           // A NaN anywhere, an infinity but as a clip bound: every value would be NaN or infinite.
           {"  - {name: a, source: item, kind: numeric, clip: [.nan, 1]}\n", "features[0].clip: want a number, not NaN"},
           {"  - {name: a, source: item, kind: numeric, mean: .inf}\n", "features[0].mean: want a finite number"},
           {"  - {name: a, source: item, kind: numeric, default: .NaN}\n", "features[0].default: want a number, not NaN"},
           {"  - {name: a, source: item, kind: id_list, table: t, max_len: .nan}\n", "features[0].max_len: want a whole number >= 1"},
       }) {
    auto spec = parse(head + c.features);
    ASSERT_FALSE(spec.has_value()) << c.features;
    EXPECT_NE(spec.error().message.find(c.expected), std::string::npos) << spec.error().message;
  }
  const auto open = parse(head + "  - {name: a, source: item, kind: numeric, clip: [-.inf, 10]}\n");
  ASSERT_TRUE(open.has_value()) << open.error().message;
  EXPECT_EQ(open->features[0].clip_high, 10.0);
  EXPECT_FALSE(parse("name: m\nfeatures: []\n").has_value());
  EXPECT_NE(parse("version: 1\n").error().message.find("name: required"), std::string::npos);
  EXPECT_NE(parse("name: m\nversion: 1\nfeatures: [\n").error().message.find("model.yaml line"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::features
