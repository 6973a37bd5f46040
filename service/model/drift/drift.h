#pragma once
// How far a model's scores in one precision (bf16) stray from its scores in
// another (fp32) on the same requests, in the terms a ranking team judges a
// serving change by: the scores themselves, each request's order of its
// items, and with labels the model's quality. python/numaserve/drift.py
// computes the same, by the same definitions, from the training side.

#include <cstddef>
#include <optional>
#include <vector>

namespace numaserve::drift {

// One request's items scored both ways, and their labels (0 or 1) if known.
struct Scored {
  std::vector<float> reference, candidate;  // fp32, bf16
  std::vector<float> labels;                // empty, or one per item
};

struct Quality {
  double auc = 0;                   // over every labelled item of every request (ties count half)
  std::optional<double> log_loss;   // mean; none when a score is outside [0, 1] (not a probability)
};

struct Report {
  std::size_t requests = 0, items = 0;
  double max_abs = 0, mean_abs = 0;  // |candidate - reference| over every item
  // Spearman's rank correlation of each request's two orders (ties get
  // their mean rank; a request of one item, or whose scores are all equal
  // both ways, counts 1): the lowest and the mean over requests.
  double min_spearman = 1, mean_spearman = 1;
  // The share of each request's top 10 by reference found in its top 10 by
  // candidate (top min(10, items)): the lowest and the mean.
  double min_top10 = 1, mean_top10 = 1;
  std::optional<Quality> reference_quality, candidate_quality;  // with labels
};

// Spearman's rho of two equally long score lists.
double spearman(const std::vector<float>& a, const std::vector<float>& b);
// The share of a's top k (by score, ties by position) that is in b's top k.
double top_k_overlap(const std::vector<float>& a, const std::vector<float>& b, std::size_t k);
// ROC AUC of `scores` against 0/1 `labels`; nullopt when one class is absent.
std::optional<double> auc(const std::vector<float>& scores, const std::vector<float>& labels);
// Mean binary cross-entropy; nullopt when a score is outside [0, 1]. Scores
// are clamped to [1e-7, 1 - 1e-7] first, as scikit-learn's log_loss did.
std::optional<double> log_loss(const std::vector<float>& scores, const std::vector<float>& labels);

// Requests whose two score lists differ in length are the caller's error
// (checked: they are skipped and not counted).
Report compare(const std::vector<Scored>& requests);

}  // namespace numaserve::drift
