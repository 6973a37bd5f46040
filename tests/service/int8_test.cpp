// int8 with real LibTorch: the demo ranker and the reference DLRM served
// with rowwise int8 (and int4) tables and int8 linear layers on AVX512_VNNI
// (the layers skipped, saying so, where this CPU has none: the machines this
// runs on differ from day to day; the tables need no instruction), their
// scores within the drift bound of fp32's, their tables in about a quarter
// (an eighth) of the memory; the refusals, and the fp32 fallback on every
// machine (NUMASERVE_CPU_INT8=off stands in for a CPU without VNNI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "demo_dir.h"
#include "precision_support.h"
#include "graph/kernel_path.h"
#include "dlrm_dir.h"
#include "model/model.h"
#include "model/rows.h"

namespace numaserve::model {
namespace {

using features::Precision;
using features::TablePrecision;
using numaserve::testing::demo_dir;
using numaserve::testing::load;
using numaserve::testing::max_difference;
using numaserve::testing::ranker_a_with;
using numaserve::testing::scripted_dir;

std::string rewrite_lines(const TorchModel& m, bool applied) {
  std::string out;
  for (const auto& rewrite : m.graph_report().rewrites) {
    if (rewrite.name != "precision") continue;
    for (const auto& line : applied ? rewrite.applied : rewrite.not_applied) out += line + "\n";
  }
  return out;
}

// Scores on rows the load did not check stay within the bound, and are not
// fp32's very scores (the forward did change).
void expect_within_bound_of_fp32(const TorchModel& narrowed, const TorchModel& fp32, const std::string& what) {
  std::uint64_t seed = 7;
  for (std::size_t rows : {1, 200, 1024}) {
    const auto batch = random_rows(narrowed.spec(), rows, seed++);
    auto want = fp32.forward(batch);
    auto got = narrowed.forward(batch);
    ASSERT_TRUE(want && got);
    ASSERT_EQ(got->size(), rows);
    EXPECT_LE(max_difference(*want, *got), narrowed.spec().precision_max_drift) << what << ", " << rows << " rows";
    EXPECT_GT(max_difference(*want, *got), 0) << what << ", " << rows << " rows: fp32's very scores";
  }
}

TEST(Int8, TheDemoRankerAndTheReferenceDlrmServeInt8WithinTheBoundOfFp32) {
  SKIP_WITHOUT(Precision::kInt8, "int8 products");
  // Not the reference DLRM with sum bags of up to 100 rows of N(0, 1): even
  // bf16 moves its unbounded scores 0.03 (precision_test.cpp).
  for (const auto& dir : {demo_dir() / "ranker_a", scripted_dir() / "dlrm_flat_weighted", scripted_dir() / "dlrm_diagonal_mean"}) {
    auto int8 = load(dir, Precision::kInt8);
    auto fp32 = load(dir, Precision::kFp32);
    ASSERT_TRUE(int8) << dir << ": " << int8.error().message;
    ASSERT_TRUE(fp32) << fp32.error().message;
    const auto report = (*int8)->precision();
    EXPECT_EQ(report.requested, "int8");
    EXPECT_EQ(report.served, "int8");
    EXPECT_EQ(report.tables, "int8");  // following the precision
    EXPECT_NE(report.instructions.find("avx512_vnni"), std::string::npos) << report.instructions;
    EXPECT_LE(report.max_drift, (*int8)->spec().precision_max_drift);
    EXPECT_EQ((*int8)->graph_report().linear.kernels, "avx512_vnni");
    expect_within_bound_of_fp32(**int8, **fp32, dir.filename().string());
  }
}

TEST(Int8, RowwiseTablesServeOnAnyCpuWithFp32LayersWithinTheBound) {
  testing::CpuWithout cpu("NUMASERVE_CPU_INT8");  // the tables need no instruction
  for (const auto tables : {TablePrecision::kInt8, TablePrecision::kInt4}) {
    auto narrowed = load(demo_dir() / "ranker_a", Precision::kFp32, tables);
    auto fp32 = load(demo_dir() / "ranker_a", Precision::kFp32);
    ASSERT_TRUE(narrowed) << narrowed.error().message;
    ASSERT_TRUE(fp32);
    const auto report = (*narrowed)->precision();
    EXPECT_EQ(report.served, "fp32");
    EXPECT_EQ(report.tables, std::string(features::kTablePrecisionNames.name(tables)));
    EXPECT_NE(rewrite_lines(**narrowed, true).find("emb_item (" ), std::string::npos) << rewrite_lines(**narrowed, true);
    if (tables == TablePrecision::kInt8) {
      expect_within_bound_of_fp32(**narrowed, **fp32, "int8 tables");
    } else {
      EXPECT_LE(report.max_drift, (*narrowed)->spec().precision_max_drift);
    }
  }
}

// A table of R rows of 32 floats (ranker_a's) holds 32 codes and 4 bytes of
// scale and bias a row in int8 (36 of 128 bytes), 16 and 4 in int4: the
// weights shrink by exactly that, the linear layers staying fp32.
TEST(Int8, WeightBytesAreTheServedSize) {
  auto fp32 = load(demo_dir() / "ranker_a", Precision::kFp32);
  ASSERT_TRUE(fp32);
  std::uint64_t rows = 0;
  for (const auto& [table, count] : (*fp32)->spec().tables) rows += count;
  for (const auto& [tables, row_bytes] : {std::pair{TablePrecision::kInt8, 36u}, std::pair{TablePrecision::kInt4, 20u}}) {
    auto m = load(demo_dir() / "ranker_a", Precision::kFp32, tables);
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ((*fp32)->weight_bytes() - (*m)->weight_bytes(), rows * (128 - row_bytes)) << features::kTablePrecisionNames.name(tables);
    // Its fp32 tables are gone: the model as written cannot run.
    EXPECT_FALSE((*m)->forward_as_written(random_rows((*m)->spec(), 2, 1)));
  }
}

// Each chain's first layer reads features of every scale, which one int8
// scale per row rounds coarsely: at ranker_a's default bound (0.005) the
// chains all in int8 move its scores past half of it, so those layers stay
// fp32 and the load says so; a looser bound takes them too. The score's
// last layer (64 -> 1) stays fp32 either way: an 8-bit product there would
// move the score itself, and it costs nothing.
TEST(Int8, EveryLayerTheBoundAllowsRunsInInt8ButTheScores) {
  SKIP_WITHOUT(Precision::kInt8, "int8 products");
  auto m = load(demo_dir() / "ranker_a", Precision::kInt8);
  ASSERT_TRUE(m) << m.error().message;
  std::string applied = rewrite_lines(**m, true), kept = rewrite_lines(**m, false);
  EXPECT_NE(applied.find(" (64 -> 32) -> int8"), std::string::npos) << applied;
  EXPECT_NE(applied.find(" (128 -> 64) -> int8"), std::string::npos) << applied;
  EXPECT_NE(kept.find("its first layer (77 -> 128) reads features, not the model's activations: kept fp32"), std::string::npos) << kept;
  EXPECT_NE(kept.find("layer 2 (64 -> 1), a score's, kept fp32"), std::string::npos) << kept;
  for (const char* table : {"emb_user", "emb_item", "emb_tag", "emb_device"}) {
    EXPECT_NE(applied.find(std::string(table) + " ("), std::string::npos) << table << " not int8:\n" << applied;
  }

  auto loose = load(ranker_a_with("precision_max_drift: 0.05\n"), Precision::kInt8);
  ASSERT_TRUE(loose) << loose.error().message;
  applied = rewrite_lines(**loose, true);
  EXPECT_NE(applied.find(" (6 -> 64, 64 -> 32) -> int8"), std::string::npos) << applied;
  EXPECT_NE(applied.find(" (77 -> 128, 128 -> 64) -> int8"), std::string::npos) << applied;
}

TEST(Int8, AnIdPastItsTableFailsAsInFp32) {
  auto m = load(demo_dir() / "ranker_a", Precision::kFp32, TablePrecision::kInt4);
  ASSERT_TRUE(m) << m.error().message;
  auto batch = random_rows((*m)->spec(), 4, 9);
  batch.bags[0].indices.push_back(1 << 30);
  auto got = (*m)->forward(batch);
  ASSERT_FALSE(got.has_value());
  EXPECT_NE(got.error().message.find("out of range"), std::string::npos) << got.error().message;
}

TEST(Int8, ACpuWithoutVnniRefusesInt8NamingTheInstruction) {
  testing::CpuWithout cpu("NUMASERVE_CPU_INT8");
  auto refused = load(demo_dir() / "ranker_a", Precision::kInt8);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "precision");
  EXPECT_NE(refused.error().message.find("precision int8: "), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("NUMASERVE_CPU_INT8=off"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("int8-if-available serves it in fp32"), std::string::npos) << refused.error().message;
}

TEST(Int8, ACpuWithoutVnniServesInt8IfAvailableInFp32AndSaysWhy) {
  testing::CpuWithout cpu("NUMASERVE_CPU_INT8");
  auto model = load(demo_dir() / "ranker_a", Precision::kInt8IfAvailable);
  ASSERT_TRUE(model) << model.error().message;
  const auto report = (*model)->precision();
  EXPECT_EQ(report.requested, "int8-if-available");
  EXPECT_EQ(report.served, "fp32");
  EXPECT_EQ(report.tables, "fp32");  // following the precision that fell back
  EXPECT_NE(report.reason.find("NUMASERVE_CPU_INT8"), std::string::npos) << report.reason;
  auto fp32 = load(demo_dir() / "ranker_a", Precision::kFp32);
  ASSERT_TRUE(fp32);
  const auto batch = random_rows((*model)->spec(), 100, 4);
  EXPECT_EQ(*(*model)->forward(batch), *(*fp32)->forward(batch));  // fp32's very scores
}

// Layers falling back to fp32 leave the tables written to narrow: without a
// rewritten forward to narrow them in, that is refused naming the key, not
// served in a forward graph optimizations were turned off for.
TEST(Int8, TablesWrittenWithoutARewrittenForwardAreRefusedWhereTheLayersFallBack) {
  testing::CpuWithout cpu("NUMASERVE_CPU_INT8");
  LoadOptions options;
  options.precision = Precision::kInt8IfAvailable;
  options.embedding_precision = TablePrecision::kInt8;
  options.graph_optimizations = false;
  auto refused = TorchModel::load(demo_dir() / "ranker_a", options);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "embedding_precision");
  EXPECT_NE(refused.error().message.find("there is none (graph optimizations"), std::string::npos) << refused.error().message;
}

// The benchmark narrows the fused ops to AVX2 to measure an older machine:
// no int8 products there, whatever this CPU has, and the load says which path.
TEST(Int8, AKernelPathWithoutInt8ProductsServesFp32LayersNamingIt) {
  SKIP_WITHOUT(Precision::kInt8, "int8 products");
  const std::string best = graph::kernel_isa();
  ASSERT_TRUE(graph::set_kernel_isa("avx2"));
  auto model = load(demo_dir() / "ranker_a", Precision::kInt8IfAvailable);
  auto refused = load(demo_dir() / "ranker_a", Precision::kInt8);
  ASSERT_TRUE(graph::set_kernel_isa(best));
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ((*model)->precision().served, "fp32");
  EXPECT_NE((*model)->precision().reason.find("the kernels' path here (avx2) has no int8 product"), std::string::npos)
      << (*model)->precision().reason;
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "precision");
}

// -if-available narrows the layers only where they are faster: the load
// times the model's linear chains in both precisions and says what it
// measured (bf16's and int8's alike; each where this CPU has it).
TEST(Int8, IfAvailableNarrowsTheLayersOnlyWhereTheyAreFaster) {
  for (const auto& [precision, name] : {std::pair{Precision::kBf16IfAvailable, "bf16"}, std::pair{Precision::kInt8IfAvailable, "int8"}}) {
    auto model = load(demo_dir() / "ranker_a", precision);
    ASSERT_TRUE(model) << model.error().message;
    const auto report = (*model)->precision();
    if (report.fp32_us == 0) {  // not timed: this CPU has no such products, and says so
      EXPECT_EQ(report.served, "fp32");
      EXPECT_FALSE(report.reason.empty());
      continue;
    }
    ASSERT_GT(report.candidate_us, 0);
    if (report.candidate_us < report.fp32_us) {
      EXPECT_EQ(report.served, name) << report.candidate_us << " us in " << name << ", " << report.fp32_us << " in fp32";
    } else {
      EXPECT_EQ(report.served, "fp32");
      EXPECT_NE(report.reason.find(std::string(name) + " is not faster on this CPU"), std::string::npos) << report.reason;
    }
  }
}

// Asked outright for a part the model has not: refused, naming the field.
TEST(Int8, AModelWithNothingToNarrowIsRefusedNamingTheField) {
  SKIP_WITHOUT(Precision::kInt8, "int8 products");
  // drifting has tables and no linear layer.
  auto layers = load(scripted_dir() / "drifting", Precision::kInt8, TablePrecision::kFp32);
  ASSERT_FALSE(layers);
  EXPECT_EQ(layers.error().field, "precision");
  EXPECT_NE(layers.error().message.find("no linear layer or embedding table"), std::string::npos) << layers.error().message;
  // With its tables following int8 it has something to narrow: served.
  auto tables_only = load(scripted_dir() / "drifting", Precision::kInt8IfAvailable);
  ASSERT_TRUE(tables_only || tables_only.error().field == "precision_max_drift") << tables_only.error().message;
  // left_alone's bags (max, padding_idx) are not fused: no table the kernels take.
  auto tables = load(scripted_dir() / "left_alone", Precision::kFp32, TablePrecision::kInt8);
  ASSERT_FALSE(tables);
  EXPECT_EQ(tables.error().field, "embedding_precision");
}

TEST(Int8, ModelYamlSetsTheTablesPrecision) {
  const auto dir = ranker_a_with("embedding_precision: int4\n");
  auto model = TorchModel::load(dir, {});
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ((*model)->precision().tables, "int4");
  EXPECT_EQ((*model)->precision().served, "fp32");
  // serve --precision fp32 stands for both keys.
  auto fp32 = load(dir, Precision::kFp32);
  ASSERT_TRUE(fp32);
  EXPECT_EQ((*fp32)->precision().tables, "fp32");
}

TEST(Int8, TheDriftOnRequestsIsReportedInRankingTerms) {
  SKIP_WITHOUT(Precision::kInt8, "int8 products");
  const auto spec = *features::read_model_spec((demo_dir() / "ranker_a").string());
  std::vector<features::Batch> requests;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) requests.push_back(random_rows(spec, 50, seed));
  LoadOptions int8;
  int8.precision = Precision::kInt8;
  auto drift = precision_drift(demo_dir() / "ranker_a", int8, requests, {});
  ASSERT_TRUE(drift) << drift.error().message;
  EXPECT_EQ(drift->items, 1000u);
  EXPECT_GT(drift->max_abs, 0);
  EXPECT_LE(drift->max_abs, features::kDefaultMaxDrift);
  EXPECT_GE(drift->min_spearman, 0.99);
}

}  // namespace
}  // namespace numaserve::model
