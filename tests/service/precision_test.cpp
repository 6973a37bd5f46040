// Precision bf16 with real LibTorch: the demo ranker and the reference DLRM
// served in bf16 where this CPU has bf16 instructions (skipped, saying so,
// where it has not: the machines this runs on differ from day to day), its
// scores within the drift bound of fp32's, its tables in half the memory;
// the refusals and the fp32 fallback on every machine (NUMASERVE_CPU_BF16=off
// stands in for a CPU without bf16); a model whose scores drift refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "demo_dir.h"
#include "precision_support.h"
#include "dlrm_dir.h"
#include "model/model.h"
#include "model/rows.h"

namespace numaserve::model {
namespace {

using numaserve::testing::demo_dir;
using numaserve::testing::load;
using numaserve::testing::max_difference;
using numaserve::testing::scripted_dir;

// The model loaded both ways (bf16 where this CPU has it).
struct Both {
  std::unique_ptr<TorchModel> bf16, fp32;
};
Both load_both(const std::filesystem::path& dir) {
  Both out;
  for (auto [precision, slot] : {std::pair{features::Precision::kBf16, &out.bf16}, std::pair{features::Precision::kFp32, &out.fp32}}) {
    auto m = load(dir, precision);
    EXPECT_TRUE(m) << m.error().message;
    if (m) *slot = std::move(*m);
  }
  return out;
}

void expect_within_bound_of_fp32(const std::filesystem::path& dir) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  const Both m = load_both(dir);
  ASSERT_TRUE(m.bf16 && m.fp32);
  const TorchModel& bf16 = *m.bf16;
  const auto report = bf16.precision();
  EXPECT_EQ(report.requested, "bf16");
  EXPECT_FALSE(report.instructions.empty());
  EXPECT_LE(report.max_drift, bf16.spec().precision_max_drift);
  std::uint64_t seed = 7;
  for (std::size_t rows : {1, 200, 1024}) {
    const auto batch = random_rows(bf16.spec(), rows, seed++);
    auto want = m.fp32->forward(batch);
    auto got = bf16.forward(batch);
    ASSERT_TRUE(want && got);
    ASSERT_EQ(got->size(), rows);
    // Other rows than the load's check: within the bound still, and not
    // fp32's scores (the forward did change).
    EXPECT_LE(max_difference(*want, *got), bf16.spec().precision_max_drift) << dir << ", " << rows << " rows";
    EXPECT_GT(max_difference(*want, *got), 0) << dir << ", " << rows << " rows: bf16 gave fp32's very scores";
  }
}

TEST(Bf16, TheDemoRankerServesWithinTheBoundOfFp32) { expect_within_bound_of_fp32(demo_dir() / "ranker_a"); }

// Mean bags, and weighted sums (the bf16 kernels' FMA path). The reference
// DLRM with sum bags of up to 100 rows of N(0, 1) strays 0.03 (here):
// refused, as it should be.
TEST(Bf16, TheReferenceDlrmServesWithinTheBoundOfFp32WithWeightedAndMeanBags) {
  for (const char* name : {"dlrm_diagonal_mean", "dlrm_flat_weighted"}) expect_within_bound_of_fp32(scripted_dir() / name);
}

// dlrm_diagonal_mean's chains all in bf16 move its scores past half the
// bound (0.0074 here: its top MLP's first layer reads the interaction's 31
// values): the load keeps each chain's first layer fp32 and says so.
TEST(Bf16, AChainsFirstLayerStaysFp32WhereBf16WouldMoveTheScoresTooFar) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  auto m = load(scripted_dir() / "dlrm_diagonal_mean", features::Precision::kBf16);
  ASSERT_TRUE(m) << m.error().message;
  std::string kept;
  for (const auto& rewrite : (*m)->graph_report().rewrites) {
    for (const auto& line : rewrite.not_applied) kept += line + "\n";
  }
  EXPECT_NE(kept.find("its first layer (31 -> 32) reads features, not the model's activations: kept fp32"), std::string::npos)
      << kept;
  EXPECT_LE((*m)->precision().max_drift, (*m)->spec().precision_max_drift);
}

TEST(Bf16, TablesTakeHalfTheMemoryAndEveryLinearLayerRunsInBf16) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  const Both m = load_both(demo_dir() / "ranker_a");
  ASSERT_TRUE(m.bf16 && m.fp32);
  const TorchModel& bf16 = *m.bf16;
  // The tables are nearly all of ranker_a's weights: half, and a little.
  EXPECT_LT(static_cast<double>(bf16.weight_bytes()), 0.55 * static_cast<double>(m.fp32->weight_bytes()));
  EXPECT_GT(static_cast<double>(bf16.weight_bytes()), 0.45 * static_cast<double>(m.fp32->weight_bytes()));
  std::string applied, kept;
  for (const auto& rewrite : bf16.graph_report().rewrites) {
    if (rewrite.name != "precision") continue;
    for (const auto& line : rewrite.applied) applied += line + "\n";
    for (const auto& line : rewrite.not_applied) kept += line + "\n";
  }
  for (const char* table : {"emb_user", "emb_item", "emb_tag", "emb_device"}) {
    EXPECT_NE(applied.find(table), std::string::npos) << table << " not bf16:\n" << applied;
  }
  // Every layer of any size: the kernels have no per-call cost.
  EXPECT_NE(applied.find("(6 -> 64, 64 -> 32) -> bf16"), std::string::npos) << applied;
  EXPECT_NE(applied.find("(77 -> 128, 128 -> 64, 64 -> 1) -> bf16"), std::string::npos) << applied;
  EXPECT_EQ(kept, "");
  const auto linear = bf16.graph_report().linear;
  EXPECT_EQ(linear.own, 5);
  EXPECT_EQ(linear.libtorch, 0);
  EXPECT_EQ(linear.kernels, "avx512_bf16");
  // Its fp32 weights are gone: the model as written cannot run.
  EXPECT_FALSE(bf16.forward_as_written(random_rows(bf16.spec(), 2, 1)));
}

TEST(Bf16, ATableAnotherOpReadsStaysFp32) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  const Both m = load_both(scripted_dir() / "shared_table");
  ASSERT_TRUE(m.bf16 && m.fp32);
  std::string applied, kept;
  for (const auto& rewrite : m.bf16->graph_report().rewrites) {
    if (rewrite.name != "precision") continue;
    for (const auto& line : rewrite.applied) applied += line + "\n";
    for (const auto& line : rewrite.not_applied) kept += line + "\n";
  }
  EXPECT_NE(kept.find("embs.3.weight (5000 x 16): also read by another op, kept fp32"), std::string::npos) << kept;
  EXPECT_NE(applied.find("embs.2.weight (500 x 16) -> bf16"), std::string::npos) << applied;
  const auto batch = random_rows(m.bf16->spec(), 64, 3);
  auto want = m.fp32->forward(batch);
  auto got = m.bf16->forward(batch);
  ASSERT_TRUE(want && got);
  EXPECT_LE(max_difference(*want, *got), m.bf16->spec().precision_max_drift);
}

TEST(Bf16, AnIdPastItsTableFailsAsInFp32) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  const Both m = load_both(demo_dir() / "ranker_a");
  ASSERT_TRUE(m.bf16 && m.fp32);
  const TorchModel& bf16 = *m.bf16;
  auto batch = random_rows(bf16.spec(), 4, 9);
  batch.bags[0].indices.push_back(1 << 30);
  auto got = bf16.forward(batch);
  ASSERT_FALSE(got.has_value());
  EXPECT_NE(got.error().message.find("out of range"), std::string::npos) << got.error().message;
  EXPECT_FALSE(m.fp32->forward(batch).has_value());
}

TEST(Bf16, AModelWhoseScoresDriftIsRefusedNamingTheBound) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  auto drifting = load(scripted_dir() / "drifting", features::Precision::kBf16);
  ASSERT_FALSE(drifting);
  EXPECT_EQ(drifting.error().field, "precision_max_drift");
  EXPECT_NE(drifting.error().message.find("above precision_max_drift 0.005"), std::string::npos) << drifting.error().message;
  // bf16-if-available is about the CPU: a model that drifts is refused too.
  EXPECT_FALSE(load(scripted_dir() / "drifting", features::Precision::kBf16IfAvailable));
  EXPECT_TRUE(load(scripted_dir() / "drifting", features::Precision::kFp32));
}

TEST(Bf16, ModelYamlSetsThePrecisionAndTheBound) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  const auto dir = numaserve::testing::ranker_a_with("precision: bf16\nprecision_max_drift: 1e-7\n");
  LoadOptions options;  // no override: model.yaml's
  auto strict = TorchModel::load(dir, options);
  ASSERT_FALSE(strict);
  EXPECT_NE(strict.error().message.find("above precision_max_drift 1e-07"), std::string::npos) << strict.error().message;
  options.precision = features::Precision::kFp32;  // serve --precision fp32 over model.yaml's
  auto fp32 = TorchModel::load(dir, options);
  ASSERT_TRUE(fp32) << fp32.error().message;
  EXPECT_EQ((*fp32)->precision().served, "fp32");
  EXPECT_EQ((*fp32)->precision().requested, "fp32");
}

TEST(Bf16, ACpuWithoutBf16RefusesBf16NamingWhatItLacks) {
  testing::CpuWithout cpu("NUMASERVE_CPU_BF16");
  auto refused = load(demo_dir() / "ranker_a", features::Precision::kBf16);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "precision");
  EXPECT_NE(refused.error().message.find("precision bf16: bf16 turned off by NUMASERVE_CPU_BF16=off"), std::string::npos)
      << refused.error().message;
}

TEST(Bf16, ACpuWithoutBf16ServesBf16IfAvailableInFp32AndSaysWhy) {
  testing::CpuWithout cpu("NUMASERVE_CPU_BF16");
  auto model = load(demo_dir() / "ranker_a", features::Precision::kBf16IfAvailable);
  ASSERT_TRUE(model) << model.error().message;
  const auto report = (*model)->precision();
  EXPECT_EQ(report.requested, "bf16-if-available");
  EXPECT_EQ(report.served, "fp32");
  EXPECT_NE(report.reason.find("NUMASERVE_CPU_BF16"), std::string::npos) << report.reason;
  auto fp32 = load(demo_dir() / "ranker_a", features::Precision::kFp32);
  ASSERT_TRUE(fp32);
  const auto batch = random_rows((*model)->spec(), 100, 4);
  EXPECT_EQ(*(*model)->forward(batch), *(*fp32)->forward(batch));  // fp32's very scores
  EXPECT_EQ((*model)->weight_bytes(), (*fp32)->weight_bytes());
}

TEST(Bf16, WithoutGraphOptimizationsBf16IsRefusedOrFallsBack) {
  LoadOptions options;
  options.graph_optimizations = false;
  options.precision = features::Precision::kBf16;
  auto refused = TorchModel::load(demo_dir() / "ranker_a", options);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "precision");
  options.precision = features::Precision::kBf16IfAvailable;
  auto fp32 = TorchModel::load(demo_dir() / "ranker_a", options);
  ASSERT_TRUE(fp32);
  EXPECT_EQ((*fp32)->precision().served, "fp32");
  EXPECT_FALSE((*fp32)->precision().reason.empty());
}

TEST(Bf16, TheDriftOnRequestsIsReportedInRankingTerms) {
  SKIP_WITHOUT(features::Precision::kBf16, "bf16");
  const auto spec = *features::read_model_spec((demo_dir() / "ranker_a").string());
  std::vector<features::Batch> requests;
  std::vector<std::vector<float>> labels;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    requests.push_back(random_rows(spec, 50, seed));
    std::vector<float> l;
    for (std::size_t i = 0; i < 50; ++i) l.push_back(static_cast<float>((i * seed) % 3 == 0));
    labels.push_back(std::move(l));
  }
  LoadOptions bf16;
  bf16.precision = features::Precision::kBf16;
  auto drift = precision_drift(demo_dir() / "ranker_a", bf16, requests, labels);
  ASSERT_TRUE(drift) << drift.error().message;
  EXPECT_EQ(drift->requests, 20u);
  EXPECT_EQ(drift->items, 1000u);
  EXPECT_GT(drift->max_abs, 0);
  EXPECT_LE(drift->max_abs, features::kDefaultMaxDrift);
  EXPECT_LE(drift->mean_abs, drift->max_abs);
  EXPECT_GE(drift->min_spearman, 0.99);
  EXPECT_GE(drift->mean_top10, 0.8);
  ASSERT_TRUE(drift->reference_quality && drift->candidate_quality);
  EXPECT_NEAR(drift->reference_quality->auc, drift->candidate_quality->auc, 0.01);
  // Labels that do not fit the requests are refused, naming them.
  labels[3].pop_back();
  auto refused = precision_drift(demo_dir() / "ranker_a", bf16, requests, labels);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "labels");
}

}  // namespace
}  // namespace numaserve::model
