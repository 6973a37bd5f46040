// The model part with real LibTorch: demo generation, load checks, forward.
#include "model/model.h"

#include <gtest/gtest.h>

#include <fstream>

#include "demo_dir.h"
#include "feature_store/embedded.h"
#include "numaserve/common/text_file.h"

namespace numaserve::model {
namespace {

using numaserve::testing::demo_dir;

std::unique_ptr<TorchModel> load(const std::filesystem::path& dir) {
  auto m = TorchModel::load(dir);
  EXPECT_TRUE(m.has_value()) << m.error().message;
  return m ? std::move(*m) : nullptr;
}

std::unique_ptr<feature_store::Entities> store(const std::filesystem::path& dir) {
  auto s = feature_store::Entities::load(dir / "store.jsonl");
  EXPECT_TRUE(s.has_value()) << s.error().message;
  return std::move(*s);
}

features::Request request_for(std::vector<std::string> items) {
  features::Request r;
  r.user.id = "u3";
  r.context = {{"hour", 9.0}, {"device", std::string("ios")}};
  for (auto& id : items) r.items.push_back({std::move(id), {}});
  return r;
}

std::vector<float> scores_of(const TorchModel& m, const feature_store::Entities& s, const features::Request& r) {
  auto batch = feature_store::extract(m.spec(), r, s);
  EXPECT_TRUE(batch.has_value()) << batch.error().message;
  auto scores = m.forward(*batch);
  EXPECT_TRUE(scores.has_value()) << scores.error().message;
  return scores ? *scores : std::vector<float>{};
}

TEST(DemoModels, AreDlrmLikeAndSmall) {
  auto a = load(demo_dir() / "ranker_a");
  auto b = load(demo_dir() / "ranker_b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->spec().name, "ranker_a");
  EXPECT_GE(a->spec().sparse_features().size(), 8u);  // the floor: >= 8 categorical features
  EXPECT_GT(a->spec().dense_features().size(), 0u);
  EXPECT_GT(a->weight_bytes(), 1000000u);  // ~1 MiB of embeddings at the tiny size
  EXPECT_LT(b->weight_bytes(), a->weight_bytes() / 4);
}

TEST(DemoModels, SameSeedSameScoresOtherSeedOtherScores) {
  const auto again = numaserve::testing::make_temp_dir("numaserve-demo-again");
  const auto other = numaserve::testing::make_temp_dir("numaserve-demo-other");
  ASSERT_TRUE(make_demo_models(again, numaserve::testing::tiny_demo(42)).has_value());
  ASSERT_TRUE(make_demo_models(other, numaserve::testing::tiny_demo(7)).has_value());
  EXPECT_EQ(read_text_file(demo_dir() / "store.jsonl").value(), read_text_file(again / "store.jsonl").value());
  const auto request = request_for({"i1", "i2", "i3", "i150"});
  for (const char* name : {"ranker_a", "ranker_b"}) {
    auto m1 = load(demo_dir() / name);
    auto m2 = load(again / name);
    auto m3 = load(other / name);
    ASSERT_TRUE(m1 && m2 && m3);
    const auto s = store(demo_dir());
    const auto first = scores_of(*m1, *s, request);
    EXPECT_EQ(first, scores_of(*m2, *s, request)) << name;
    EXPECT_NE(first, scores_of(*m3, *s, request)) << name;
    // Scores are probabilities, and they depend on the item.
    for (float x : first) EXPECT_TRUE(x > 0 && x < 1) << x;
    EXPECT_NE(first[0], first[1]);
  }
  std::filesystem::remove_all(again);
  std::filesystem::remove_all(other);
}

TEST(Forward, BatchOfNEqualsNSingleForwards) {
  auto m = load(demo_dir() / "ranker_a");
  ASSERT_TRUE(m);
  const auto s = store(demo_dir());
  const std::vector<std::string> items = {"i0", "i5", "i77", "unknown-item", "i199"};
  const auto together = scores_of(*m, *s, request_for(items));
  ASSERT_EQ(together.size(), items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto alone = scores_of(*m, *s, request_for({items[i]}));
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_NEAR(alone[0], together[i], 1e-6) << items[i];
  }
}

TEST(Forward, ConcatenatedBatchesScoreAsTheirParts) {
  auto m = load(demo_dir() / "ranker_a");
  ASSERT_TRUE(m);
  const auto s = store(demo_dir());
  auto b1 = feature_store::extract(m->spec(), request_for({"i1", "i2"}), *s);
  auto b2 = feature_store::extract(m->spec(), request_for({"i3"}), *s);
  ASSERT_TRUE(b1 && b2);
  const auto joined = m->forward(features::concat({&*b1, &*b2}));
  ASSERT_TRUE(joined.has_value());
  const auto s1 = m->forward(*b1).value();
  const auto s2 = m->forward(*b2).value();
  ASSERT_EQ(joined->size(), 3u);
  EXPECT_NEAR((*joined)[0], s1[0], 1e-6);
  EXPECT_NEAR((*joined)[1], s1[1], 1e-6);
  EXPECT_NEAR((*joined)[2], s2[0], 1e-6);
}

TEST(Forward, WrongShapesAreErrorsNotCrashes) {
  auto m = load(demo_dir() / "ranker_a");
  ASSERT_TRUE(m);
  features::Batch batch;
  batch.rows = 2;
  batch.dense_width = 1;  // the model wants 6 columns
  batch.dense = {1, 2};
  auto scores = m->forward(batch);
  ASSERT_FALSE(scores.has_value());
  EXPECT_NE(scores.error().message.find("ranker_a: forward failed"), std::string::npos) << scores.error().message;
}

TEST(Load, NamesWhatIsWrong) {
  const auto dir = numaserve::testing::make_temp_dir("numaserve-badmodel");
  auto missing = TorchModel::load(dir);
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("model.yaml"), std::string::npos) << missing.error().message;

  std::filesystem::copy_file(demo_dir() / "ranker_b" / "model.yaml", dir / "model.yaml");
  auto no_pt = TorchModel::load(dir);
  ASSERT_FALSE(no_pt.has_value());
  EXPECT_NE(no_pt.error().message.find("model.pt: no such file"), std::string::npos) << no_pt.error().message;

  std::ofstream(dir / "model.pt") << "not a zip archive";
  auto garbage = TorchModel::load(dir);
  ASSERT_FALSE(garbage.has_value());
  EXPECT_NE(garbage.error().message.find("not a TorchScript model"), std::string::npos) << garbage.error().message;

  // model.yaml promising more rows than model.pt has would hash ids past the table's end.
  std::filesystem::copy_file(demo_dir() / "ranker_b" / "model.pt", dir / "model.pt",
                             std::filesystem::copy_options::overwrite_existing);
  auto yaml = read_text_file(dir / "model.yaml").value();
  yaml.replace(yaml.find("category: 2048"), 14, "category: 4096");
  std::ofstream(dir / "model.yaml", std::ios::trunc) << yaml;
  auto mismatch = TorchModel::load(dir);
  ASSERT_FALSE(mismatch.has_value());
  EXPECT_EQ(mismatch.error().field, "tables.category");
  EXPECT_NE(mismatch.error().message.find("4096 rows in model.yaml but 2048 in model.pt"), std::string::npos)
      << mismatch.error().message;
  std::filesystem::remove_all(dir);
}

TEST(Weights, AreResidentAndLocatable) {
  auto m = load(demo_dir() / "ranker_a");
  ASSERT_TRUE(m);
  auto pages = numa::locate_pages(m->weights());
  ASSERT_TRUE(pages.has_value()) << pages.error().message;
  EXPECT_GE(pages->resident() * 4096, m->weight_bytes());  // loaded weights are written, hence resident
  EXPECT_EQ(pages->not_resident, 0u);
}

TEST(Runtime, NamesTheBlasInUse) {
  // Linking the reference BLAS instead of OpenBLAS costs 17x in forward speed.
  EXPECT_NE(runtime_summary().find("BLAS openblas"), std::string::npos) << runtime_summary();
}

}  // namespace
}  // namespace numaserve::model
