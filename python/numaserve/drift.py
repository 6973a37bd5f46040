"""How far a model's scores in one precision stray from another's, by the
definitions the service's `numaserve check-model --precision bf16 --requests`
uses (service/model/drift/drift.cpp): the training team's own check of a
bf16 or int8 (or any other) serving change, on scores it has from both sides.

    import numaserve
    report = numaserve.drift.compare(fp32_scores, bf16_scores, labels)
    report.max_abs, report.min_spearman, report.mean_top10, report.candidate_quality.auc

Each argument is a list of requests, each a list of its items' scores (or
labels, 0 or 1). Torch-free.
"""
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

__all__ = ["Quality", "Report", "spearman", "top_k_overlap", "auc", "log_loss", "compare"]


@dataclass
class Quality:
    auc: float
    log_loss: Optional[float]  # None when a score is outside [0, 1]


@dataclass
class Report:
    requests: int = 0
    items: int = 0
    max_abs: float = 0.0
    mean_abs: float = 0.0
    min_spearman: float = 1.0
    mean_spearman: float = 1.0
    min_top10: float = 1.0
    mean_top10: float = 1.0
    reference_quality: Optional[Quality] = None
    candidate_quality: Optional[Quality] = None


def _ranks(x: Sequence[float]) -> List[float]:
    """Ranks from 1; ties take the mean of the ranks they span."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    out = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho; 1 for fewer than two items or no order either way,
    0 for an order against none."""
    n = len(a)
    if n < 2 or len(b) != n:
        return 1.0
    ra, rb = _ranks(a), _ranks(b)
    mean = (n + 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb))
    va = sum((x - mean) ** 2 for x in ra)
    vb = sum((y - mean) ** 2 for y in rb)
    if va == 0 and vb == 0:
        return 1.0
    if va == 0 or vb == 0:
        return 0.0
    return cov / math.sqrt(va * vb)


def _top(x: Sequence[float], k: int) -> set:
    return set(sorted(range(len(x)), key=lambda i: -x[i])[:k])  # sorted() is stable: ties by position


def top_k_overlap(a: Sequence[float], b: Sequence[float], k: int = 10) -> float:
    """The share of a's top k found in b's top k."""
    ta = _top(a, k)
    return len(ta & _top(b, k)) / len(ta) if ta else 1.0


def auc(scores: Sequence[float], labels: Sequence[float]) -> Optional[float]:
    """ROC AUC (ties count half); None when one class is absent."""
    r = _ranks(scores)
    positives = sum(1 for y in labels if y > 0.5)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return None
    rank_sum = sum(ri for ri, y in zip(r, labels) if y > 0.5)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def log_loss(scores: Sequence[float], labels: Sequence[float]) -> Optional[float]:
    """Mean binary cross-entropy, scores clamped to [1e-7, 1 - 1e-7]; None
    when a score is not a probability."""
    if not scores:
        return None
    total = 0.0
    for s, y in zip(scores, labels):
        if not 0 <= s <= 1:
            return None
        p = min(max(float(s), 1e-7), 1 - 1e-7)
        total -= math.log(p) if y > 0.5 else math.log(1 - p)
    return total / len(scores)


def compare(reference: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]],
            labels: Optional[Sequence[Sequence[float]]] = None) -> Report:
    """reference (fp32) against candidate (bf16, int8, ...), request by request; a
    request whose two lists differ in length is skipped."""
    out = Report()
    abs_sum = spearman_sum = top_sum = 0.0
    pooled_ref, pooled_cand, pooled_labels = [], [], []
    labelled = labels is not None
    for i, (ref, cand) in enumerate(zip(reference, candidate)):
        if len(ref) != len(cand):
            continue
        out.requests += 1
        out.items += len(ref)
        for x, y in zip(ref, cand):
            d = abs(float(y) - float(x))
            d = math.inf if math.isnan(d) else d
            out.max_abs = max(out.max_abs, d)
            abs_sum += d
        rho, overlap = spearman(ref, cand), top_k_overlap(ref, cand, 10)
        out.min_spearman = min(out.min_spearman, rho)
        out.min_top10 = min(out.min_top10, overlap)
        spearman_sum += rho
        top_sum += overlap
        request_labels = labels[i] if labelled and i < len(labels) else []
        if len(request_labels) != len(ref):
            labelled = False
        pooled_ref += ref
        pooled_cand += cand
        pooled_labels += request_labels
    if out.requests == 0:
        return out
    out.mean_abs = abs_sum / max(out.items, 1)
    out.mean_spearman = spearman_sum / out.requests
    out.mean_top10 = top_sum / out.requests
    if labelled:
        def quality(scores):
            a = auc(scores, pooled_labels)
            return None if a is None else Quality(a, log_loss(scores, pooled_labels))
        out.reference_quality = quality(pooled_ref)
        out.candidate_quality = quality(pooled_cand)
    return out
