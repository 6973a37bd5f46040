// --graph-optimizations with real LibTorch: the rewrites on the demo models
// and on DLRM-style models scripted by PyTorch from the reference DLRM's
// structure (dlrm_models.py beside this file), the patterns they must leave
// alone, and the optimized forward's scores against the model as written
// over batches of 1 to 1,024 rows with empty, single and 100-id bags
// (random_rows), ids anywhere in their tables (one of one row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "demo_dir.h"
#include "dlrm_dir.h"
#include "feature_store/embedded.h"
#include "graph/kernel_path.h"
#include "model/model.h"
#include "model/rows.h"

namespace numaserve::model {
namespace {

using numaserve::testing::demo_dir;
using numaserve::testing::scripted_dir;

std::unique_ptr<TorchModel> load(const std::filesystem::path& dir, bool optimize, bool linear_kernels = true) {
  LoadOptions options;
  options.graph_optimizations = optimize;
  options.linear_kernels = linear_kernels;
  auto m = TorchModel::load(dir, options);
  EXPECT_TRUE(m.has_value()) << m.error().message;
  return m ? std::move(*m) : nullptr;
}

// Both forwards are fp32 sums of the same terms in different orders: each
// is within the arithmetic's bound of the exact score (rounding_bound), so
// they are within twice it of each other, on every CPU and BLAS core. And
// within the load's own bound (kScoreTolerance).
void expect_same_scores(const TorchModel& model, const features::Batch& batch) {
  auto optimized = model.forward(batch);
  auto written = model.forward_as_written(batch);
  auto bound = model.rounding_bound(batch);
  ASSERT_TRUE(optimized && written) << (optimized ? written.error().message : optimized.error().message);
  ASSERT_TRUE(bound) << bound.error().message;
  ASSERT_EQ(optimized->size(), batch.rows);
  ASSERT_EQ(written->size(), batch.rows);
  for (std::size_t r = 0; r < batch.rows; ++r) {
    const double a = (*optimized)[r], b = (*written)[r];
    EXPECT_LE(std::abs(a - b), 2 * (*bound)[r]) << model.spec().name << " row " << r << " of " << batch.rows;
    EXPECT_LE(std::abs(a - b), kScoreTolerance * std::max({std::abs(a), std::abs(b), 1.0}))
        << model.spec().name << " row " << r << " of " << batch.rows;
  }
}

void expect_same_scores_everywhere(const TorchModel& model) {
  std::uint64_t seed = 1;
  for (std::size_t rows : {1, 7, 200, 1024}) expect_same_scores(model, random_rows(model.spec(), rows, seed++));
}

std::size_t applied(const api::GraphReport& report, const std::string& rewrite) {
  for (const auto& r : report.rewrites) {
    if (r.name == rewrite) return r.applied.size();
  }
  return 0;
}

std::string not_applied(const api::GraphReport& report) {
  std::string out;
  for (const auto& r : report.rewrites) {
    for (const auto& line : r.not_applied) out += r.name + ": " + line + "\n";
  }
  return out;
}

TEST(GraphOptimizations, FuseTheDemoRankersInteractionAndItsNineBagsIntoOneOp) {
  auto a = load(demo_dir() / "ranker_a", true);
  ASSERT_TRUE(a);
  const auto report = a->graph_report();
  EXPECT_EQ(report.state, "optimized") << report.reason;
  // The bottom MLP (2 layers) and the top MLP (3) are one chain each.
  EXPECT_EQ(a->fused_ops(), (std::map<std::string, int>{{"numaserve::dot_interaction_flat", 1},
                                                        {"numaserve::embedding_bags", 1},
                                                        {"numaserve::linear_chain", 2},
                                                        {"numaserve::sigmoid", 1}}))
      << not_applied(report);
  ASSERT_EQ(applied(report, "linear_chains"), 2u);
  ASSERT_EQ(applied(report, "embedding_bags"), 1u);
  for (const auto& r : report.rewrites) {
    if (r.name == "embedding_bags") {
      EXPECT_NE(r.applied[0].find("9 embedding_bag calls"), std::string::npos) << r.applied[0];
    }
  }
  EXPECT_EQ(not_applied(report), "");
  EXPECT_EQ(report.linear.own, 5);
  EXPECT_EQ(report.linear.libtorch, 0);
  EXPECT_EQ(report.linear.kernels, graph::kernel_isa());
  expect_same_scores_everywhere(*a);

  auto b = load(demo_dir() / "ranker_b", true);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->fused_ops(), (std::map<std::string, int>{{"numaserve::embedding_bags", 1},
                                                        {"numaserve::linear_chain", 1},
                                                        {"numaserve::sigmoid", 1}}));
  expect_same_scores_everywhere(*b);
}

TEST(GraphOptimizations, TheFusedOpsSplitRowsOverTheIntraOpThreadsWithTheSameScores) {
  auto a = load(demo_dir() / "ranker_a", true);
  ASSERT_TRUE(a);
  const auto batch = random_rows(a->spec(), 700, 4);
  set_intra_op_threads(1);
  const auto one = a->forward(batch);
  set_intra_op_threads(2);
  const auto two = a->forward(batch);
  set_intra_op_threads(1);
  ASSERT_TRUE(one && two);
  // Each row is one task's whole work, and each output of a linear chain
  // one sum in a fixed order: the split changes no bit.
  ASSERT_EQ(*one, *two);
  expect_same_scores(*a, batch);
}

// The rows of one request repeat their user's and context's bags, which the
// fused op pools once; rows of several requests joined repeat them in runs;
// rows of different users share nothing. In each case the fused forward's
// scores are the model's (the load's bound), and pooling every bag anyway
// gives the very same bits.
TEST(GraphOptimizations, RepeatedUserBagsArePooledOnceWithTheSameScores) {
  auto a = load(demo_dir() / "ranker_a", true);
  ASSERT_TRUE(a);
  auto store = feature_store::Entities::load(demo_dir() / "store.jsonl");
  ASSERT_TRUE(store.has_value()) << store.error().message;
  auto request = [&](const std::string& user, int items, int first_item, double hour) {
    features::Request r;
    r.user.id = user;
    r.context = {{"hour", hour}, {"device", std::string("ios")}};
    for (int i = 0; i < items; ++i) r.items.push_back({"i" + std::to_string((first_item + i) % 200), {}});
    auto batch = feature_store::extract(a->spec(), r, **store);
    EXPECT_TRUE(batch.has_value());
    return batch ? std::move(*batch) : features::Batch{};
  };
  const auto one_request = request("u1", 200, 0, 20);
  const auto a1 = request("u1", 30, 0, 20), a2 = request("u2", 1, 40, 20), a3 = request("u2", 50, 7, 9);
  const auto joined = features::concat({&a1, &a2, &a3});
  std::vector<features::Batch> singles;
  for (int u = 0; u < 64; ++u) singles.push_back(request("u" + std::to_string(u), 1, u * 3, u % 24));
  std::vector<const features::Batch*> parts;
  for (const auto& b : singles) parts.push_back(&b);
  const auto nothing_shared = features::concat(parts);
  for (const auto* batch : {&one_request, &joined, &nothing_shared}) {
    expect_same_scores(*a, *batch);
    graph::set_bag_reuse(false);
    const auto every_bag = a->forward(*batch);
    graph::set_bag_reuse(true);
    const auto reused = a->forward(*batch);
    ASSERT_TRUE(every_bag && reused);
    EXPECT_EQ(*every_bag, *reused) << "rows " << batch->rows;
  }
}

// Rows [begin, end) of `batch`, as a request of those rows alone would give them.
features::Batch rows_of(const features::Batch& batch, std::size_t begin, std::size_t end) {
  features::Batch out;
  out.rows = end - begin;
  out.dense_width = batch.dense_width;
  out.dense.assign(batch.dense.begin() + static_cast<std::ptrdiff_t>(begin * batch.dense_width),
                   batch.dense.begin() + static_cast<std::ptrdiff_t>(end * batch.dense_width));
  for (const auto& bag : batch.bags) {
    const auto first = bag.offsets[begin];
    const auto last = end < batch.rows ? bag.offsets[end] : static_cast<std::int64_t>(bag.indices.size());
    features::Bag part;
    for (std::size_t r = begin; r < end; ++r) part.offsets.push_back(bag.offsets[r] - first);
    part.indices.assign(bag.indices.begin() + first, bag.indices.begin() + last);
    out.bags.push_back(std::move(part));
  }
  return out;
}

// A row's score is the same bits alone, among 7 or 200 rows, or joined with
// other requests' rows into 1,000, and with one intra-op thread or two:
// every op of the optimized forward reduces each output in an order that
// does not depend on the rows beside it.
TEST(GraphOptimizations, ARowsScoreIsTheSameBitsWhateverItsBatch) {
  for (const auto& dir : {demo_dir() / "ranker_a", scripted_dir() / "dlrm", scripted_dir() / "dlrm_flat_weighted"}) {
    auto m = load(dir, true);
    ASSERT_TRUE(m) << dir;
    const auto all = random_rows(m->spec(), 1000, 17);
    const auto whole = m->forward(all);
    ASSERT_TRUE(whole) << whole.error().message;
    for (const std::size_t row : {0u, 1u, 6u, 7u, 8u, 31u, 200u, 523u, 999u}) {
      for (const std::size_t size : {1u, 7u, 200u}) {
        const std::size_t begin = std::min(row - std::min(row, size / 2), 1000 - size);
        for (unsigned threads : {1u, 2u}) {
          set_intra_op_threads(threads);
          const auto part = m->forward(rows_of(all, begin, begin + size));
          set_intra_op_threads(1);
          ASSERT_TRUE(part) << part.error().message;
          const float alone = (*part)[row - begin], joined = (*whole)[row];
          EXPECT_EQ(0, std::memcmp(&alone, &joined, sizeof alone))
              << dir.filename() << " row " << row << ": " << alone << " among " << size << " rows, " << joined
              << " among 1,000 (" << threads << " threads)";
        }
      }
    }
  }
}

// --linear libtorch (LoadOptions::linear_kernels false): every linear layer
// stays on LibTorch, and the report says so.
TEST(GraphOptimizations, LinearKernelsOffLeaveTheLayersToLibTorch) {
  auto a = load(demo_dir() / "ranker_a", true, false);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->fused_ops(), (std::map<std::string, int>{{"numaserve::dot_interaction_flat", 1},
                                                        {"numaserve::embedding_bags", 1},
                                                        {"numaserve::sigmoid", 1}}));
  EXPECT_EQ(applied(a->graph_report(), "linear_chains"), 0u);
  EXPECT_EQ(a->graph_report().linear.own, 0);
  EXPECT_EQ(a->graph_report().linear.libtorch, 5);
  EXPECT_NE(not_applied(a->graph_report()).find("linear_chains: turned off"), std::string::npos) << not_applied(a->graph_report());
  expect_same_scores_everywhere(*a);
}

TEST(GraphOptimizations, OffRunsTheModelAsWritten) {
  auto a = load(demo_dir() / "ranker_a", false);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->graph_report().state, "off");
  EXPECT_TRUE(a->fused_ops().empty());
  const auto batch = random_rows(a->spec(), 50, 3);
  EXPECT_EQ(*a->forward(batch), *a->forward_as_written(batch));
}

TEST(GraphOptimizations, FuseTheReferenceDlrmWrittenWithEmbeddingBagModulesAndIndexing) {
  for (const char* name : {"dlrm", "dlrm_diagonal_mean"}) {
    auto m = load(scripted_dir() / name, true);
    ASSERT_TRUE(m) << name;
    EXPECT_EQ(m->graph_report().state, "optimized") << name << ": " << m->graph_report().reason;
    EXPECT_EQ(m->fused_ops(), (std::map<std::string, int>{{"numaserve::dot_interaction", 1},
                                                          {"numaserve::embedding_bags", 1},
                                                          {"numaserve::linear_chain", 2},
                                                          {"numaserve::sigmoid", 1}}))
        << name << ":\n" << not_applied(m->graph_report());
    expect_same_scores_everywhere(*m);
  }
}

TEST(GraphOptimizations, FuseWeightedAndMeanBagsAndTheFlatTriangleWithItsDiagonal) {
  auto m = load(scripted_dir() / "dlrm_flat_weighted", true);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->fused_ops(), (std::map<std::string, int>{{"numaserve::dot_interaction_flat", 1},
                                                        {"numaserve::embedding_bags", 1},
                                                        {"numaserve::linear_chain", 2},
                                                        {"numaserve::sigmoid", 1}}))
      << not_applied(m->graph_report());
  expect_same_scores_everywhere(*m);
}

// With the linear layers left to LibTorch, nothing of left_alone matches:
// it runs as written, bit for bit.
TEST(GraphOptimizations, LeaveAloneWhatIsNotTheirPatternAndSayWhy) {
  auto m = load(scripted_dir() / "left_alone", true, false);
  ASSERT_TRUE(m);
  const auto report = m->graph_report();
  EXPECT_EQ(report.state, "unchanged");
  EXPECT_TRUE(m->fused_ops().empty());
  const std::string why = not_applied(report);
  EXPECT_NE(why.find("the second operand is not the first transposed"), std::string::npos) << why;
  EXPECT_NE(why.find("not a lower triangle"), std::string::npos) << why;
  EXPECT_NE(why.find("mode max"), std::string::npos) << why;
  EXPECT_NE(why.find("padding_idx"), std::string::npos) << why;
  const auto batch = random_rows(m->spec(), 30, 5);
  EXPECT_EQ(*m->forward(batch), *m->forward_as_written(batch));
}

TEST(GraphOptimizations, AnIdPastItsTableFailsAsTheModelAsWrittenDoes) {
  auto a = load(demo_dir() / "ranker_a", true);
  ASSERT_TRUE(a);
  auto batch = random_rows(a->spec(), 4, 9);
  batch.bags[0].indices.push_back(1 << 30);  // past every table, in the last row's bag
  auto optimized = a->forward(batch);
  auto written = a->forward_as_written(batch);
  ASSERT_FALSE(optimized.has_value());
  ASSERT_FALSE(written.has_value());
  EXPECT_EQ(optimized.error().message.substr(0, 20), written.error().message.substr(0, 20));
}

TEST(GraphOptimizations, CheckModelReportsTheRewrites) {
  auto checked = check_model(scripted_dir() / "dlrm");
  ASSERT_TRUE(checked) << checked.error().message;
  EXPECT_EQ(checked->graph.state, "optimized");
  EXPECT_EQ(applied(checked->graph, "dot_interaction"), 1u);
  EXPECT_EQ(applied(checked->graph, "embedding_bags"), 1u);
}

}  // namespace
}  // namespace numaserve::model
