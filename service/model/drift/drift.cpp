#include "drift/drift.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace numaserve::drift {
namespace {

// Ranks from 1, ties given the mean of the ranks they span.
std::vector<double> ranks(const std::vector<float>& x) {
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&x](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    const double mean = (static_cast<double>(i) + static_cast<double>(j)) / 2 + 1;
    for (std::size_t k = i; k <= j; ++k) out[order[k]] = mean;
    i = j + 1;
  }
  return out;
}

// The indices of the k highest scores, ties broken by position.
std::vector<std::size_t> top(const std::vector<float>& x, std::size_t k) {
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&x](std::size_t a, std::size_t b) { return x[a] > x[b]; });
  order.resize(std::min(k, order.size()));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

double spearman(const std::vector<float>& a, const std::vector<float>& b) {
  const std::size_t n = a.size();
  if (n < 2 || b.size() != n) return 1;
  const auto ra = ranks(a), rb = ranks(b);
  const double mean = (static_cast<double>(n) + 1) / 2;
  double cov = 0, va = 0, vb = 0;
  for (std::size_t i = 0; i < n; ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (va == 0 && vb == 0) return 1;  // all equal both ways: the same (lack of) order
  if (va == 0 || vb == 0) return 0;  // one way has no order to agree with
  return cov / std::sqrt(va * vb);
}

double top_k_overlap(const std::vector<float>& a, const std::vector<float>& b, std::size_t k) {
  const auto ta = top(a, k), tb = top(b, k);
  if (ta.empty()) return 1;
  std::vector<std::size_t> both;
  std::set_intersection(ta.begin(), ta.end(), tb.begin(), tb.end(), std::back_inserter(both));
  return static_cast<double>(both.size()) / static_cast<double>(ta.size());
}

std::optional<double> auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  // Mann-Whitney: the mean rank of the positives, from tie-averaged ranks.
  const auto r = ranks(scores);
  double positives = 0, rank_sum = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] > 0.5f) {
      positives += 1;
      rank_sum += r[i];
    }
  }
  const double negatives = static_cast<double>(labels.size()) - positives;
  if (positives == 0 || negatives == 0) return std::nullopt;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

std::optional<double> log_loss(const std::vector<float>& scores, const std::vector<float>& labels) {
  if (scores.empty()) return std::nullopt;
  double sum = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (!(scores[i] >= 0 && scores[i] <= 1)) return std::nullopt;
    const double p = std::clamp(static_cast<double>(scores[i]), 1e-7, 1 - 1e-7);
    sum -= labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
  }
  return sum / static_cast<double>(scores.size());
}

Report compare(const std::vector<Scored>& requests) {
  Report out;
  double abs_sum = 0, spearman_sum = 0, top_sum = 0;
  std::vector<float> reference, candidate, labels;
  bool labelled = true;
  for (const auto& r : requests) {
    if (r.reference.size() != r.candidate.size()) continue;
    ++out.requests;
    out.items += r.reference.size();
    for (std::size_t i = 0; i < r.reference.size(); ++i) {
      const double d = std::abs(static_cast<double>(r.candidate[i]) - r.reference[i]);
      const double diff = std::isnan(d) ? INFINITY : d;
      out.max_abs = std::max(out.max_abs, diff);
      abs_sum += diff;
    }
    const double rho = spearman(r.reference, r.candidate), overlap = top_k_overlap(r.reference, r.candidate, 10);
    out.min_spearman = std::min(out.min_spearman, rho);
    out.min_top10 = std::min(out.min_top10, overlap);
    spearman_sum += rho;
    top_sum += overlap;
    if (r.labels.size() != r.reference.size()) labelled = false;
    reference.insert(reference.end(), r.reference.begin(), r.reference.end());
    candidate.insert(candidate.end(), r.candidate.begin(), r.candidate.end());
    labels.insert(labels.end(), r.labels.begin(), r.labels.end());
  }
  if (out.requests == 0) return out;
  out.mean_abs = abs_sum / static_cast<double>(std::max<std::size_t>(out.items, 1));
  out.mean_spearman = spearman_sum / static_cast<double>(out.requests);
  out.mean_top10 = top_sum / static_cast<double>(out.requests);
  if (labelled) {
    const auto quality = [&labels](const std::vector<float>& scores) -> std::optional<Quality> {
      const auto a = auc(scores, labels);
      if (!a) return std::nullopt;
      return Quality{*a, log_loss(scores, labels)};
    };
    out.reference_quality = quality(reference);
    out.candidate_quality = quality(candidate);
  }
  return out;
}

}  // namespace numaserve::drift
