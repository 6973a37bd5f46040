// The drift report's measures against values worked out by hand (and, for
// AUC and Spearman with ties, by the definitions scikit-learn and SciPy
// use), and its aggregation over requests.
#include "drift/drift.h"

#include <gtest/gtest.h>

#include <cmath>

namespace numaserve::drift {
namespace {

TEST(Drift, SpearmanIsOneForTheSameOrderAndMinusOneForItsReverse) {
  EXPECT_DOUBLE_EQ(spearman({0.1f, 0.5f, 0.3f}, {1, 9, 4}), 1);
  EXPECT_DOUBLE_EQ(spearman({0.1f, 0.5f, 0.3f}, {9, 1, 4}), -1);
  // One swap of neighbours in five: 1 - 6 * 2 / (5 * 24).
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {1, 2, 4, 3, 5}), 0.9, 1e-12);
  // Ties take their mean rank: a = [1, 2.5, 2.5, 4], b = [1, 2, 3, 4]:
  // Pearson of the ranks = 4.5 / sqrt(4.5 * 5) (scipy.stats.spearmanr).
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 2, 3, 4}), 4.5 / std::sqrt(4.5 * 5), 1e-12);
  EXPECT_DOUBLE_EQ(spearman({0.5f}, {0.7f}), 1);              // one item: nothing to disagree on
  EXPECT_DOUBLE_EQ(spearman({1, 1, 1}, {2, 2, 2}), 1);        // no order either way
  EXPECT_DOUBLE_EQ(spearman({1, 1, 1}, {1, 2, 3}), 0);        // an order against none
}

TEST(Drift, TopTenOverlapCountsTheSharedItems) {
  std::vector<float> a, b;
  for (int i = 0; i < 20; ++i) a.push_back(static_cast<float>(i));
  b = a;
  EXPECT_DOUBLE_EQ(top_k_overlap(a, b, 10), 1);
  std::swap(b[10], b[9]);  // item 10 enters b's top ten, item 9 leaves it
  EXPECT_DOUBLE_EQ(top_k_overlap(a, b, 10), 0.9);
  EXPECT_DOUBLE_EQ(top_k_overlap({3, 1, 2}, {1, 3, 2}, 10), 1);  // fewer than ten: all of them
}

TEST(Drift, AucCountsTiesAsHalfAndLogLossClampsTheScores) {
  EXPECT_DOUBLE_EQ(*auc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);  // sklearn's roc_auc_score example
  EXPECT_DOUBLE_EQ(*auc({0.5f, 0.5f}, {0, 1}), 0.5);
  EXPECT_FALSE(auc({0.2f, 0.3f}, {1, 1}));  // one class only
  EXPECT_NEAR(*log_loss({0.9f, 0.2f}, {1, 0}), -(std::log(0.9f) + std::log(0.8f)) / 2, 1e-7);
  EXPECT_NEAR(*log_loss({1.f}, {0}), -std::log(1e-7), 1e-6);  // clamped, not infinite
  EXPECT_FALSE(log_loss({1.5f}, {1}));                       // a logit, not a probability
}

TEST(Drift, ComparesEachRequestAndPoolsTheItems) {
  std::vector<Scored> requests = {
      {{0.1f, 0.2f, 0.3f}, {0.1f, 0.2f, 0.3f}, {0, 0, 1}},
      {{0.5f, 0.6f}, {0.6f, 0.5f}, {1, 0}},  // reversed: Spearman -1
  };
  const Report r = compare(requests);
  EXPECT_EQ(r.requests, 2u);
  EXPECT_EQ(r.items, 5u);
  EXPECT_NEAR(r.max_abs, 0.1, 1e-6);
  EXPECT_NEAR(r.mean_abs, 0.2 / 5, 1e-6);
  EXPECT_DOUBLE_EQ(r.min_spearman, -1);
  EXPECT_DOUBLE_EQ(r.mean_spearman, 0);
  EXPECT_DOUBLE_EQ(r.mean_top10, 1);  // both top tens hold every item
  ASSERT_TRUE(r.reference_quality && r.candidate_quality);
  // Pooled: positives 0.3 and 0.5 against 0.1, 0.2, 0.6 (reference): 4 of 6 pairs.
  EXPECT_NEAR(r.reference_quality->auc, 4.0 / 6, 1e-12);
  EXPECT_NEAR(r.candidate_quality->auc, 5.0 / 6, 1e-12);
  // A request without labels: no quality.
  requests.push_back({{0.2f}, {0.2f}, {}});
  EXPECT_FALSE(compare(requests).reference_quality);
  // NaN against a number is the largest difference there is.
  EXPECT_TRUE(std::isinf(compare({{{0.5f}, {NAN}, {}}}).max_abs));
}

}  // namespace
}  // namespace numaserve::drift
