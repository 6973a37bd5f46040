"""numaserve.drift against the cases the service's own drift report is
tested on (tests/unit/model/drift_test.cpp): the same definitions, the
same numbers."""
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numaserve  # noqa: E402
from numaserve import drift  # noqa: E402


def test_spearman_orders_ties_and_degenerate_requests():
    assert drift.spearman([0.1, 0.5, 0.3], [1, 9, 4]) == 1
    assert drift.spearman([0.1, 0.5, 0.3], [9, 1, 4]) == -1
    assert drift.spearman([1, 2, 3, 4, 5], [1, 2, 4, 3, 5]) == pytest.approx(0.9, abs=1e-12)
    assert drift.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5), abs=1e-12)
    assert drift.spearman([0.5], [0.7]) == 1
    assert drift.spearman([1, 1, 1], [2, 2, 2]) == 1
    assert drift.spearman([1, 1, 1], [1, 2, 3]) == 0


def test_top_ten_overlap():
    a = list(range(20))
    b = list(a)
    assert drift.top_k_overlap(a, b) == 1
    b[9], b[10] = b[10], b[9]
    assert drift.top_k_overlap(a, b) == 0.9
    assert drift.top_k_overlap([3, 1, 2], [1, 3, 2]) == 1


def test_auc_and_log_loss():
    assert drift.auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert drift.auc([0.5, 0.5], [0, 1]) == 0.5
    assert drift.auc([0.2, 0.3], [1, 1]) is None
    assert drift.log_loss([0.9, 0.2], [1, 0]) == pytest.approx(-(math.log(0.9) + math.log(0.8)) / 2)
    assert drift.log_loss([1.0], [0]) == pytest.approx(-math.log(1e-7), rel=1e-6)
    assert drift.log_loss([1.5], [1]) is None


def test_compare_pools_items_and_reports_per_request_orders():
    ref = [[0.1, 0.2, 0.3], [0.5, 0.6]]
    cand = [[0.1, 0.2, 0.3], [0.6, 0.5]]
    r = numaserve.drift.compare(ref, cand, [[0, 0, 1], [1, 0]])
    assert (r.requests, r.items) == (2, 5)
    assert r.max_abs == pytest.approx(0.1)
    assert r.mean_abs == pytest.approx(0.2 / 5)
    assert (r.min_spearman, r.mean_spearman, r.mean_top10) == (-1, 0, 1)
    assert r.reference_quality.auc == pytest.approx(4 / 6)
    assert r.candidate_quality.auc == pytest.approx(5 / 6)
    assert numaserve.drift.compare(ref + [[0.2]], cand + [[0.2]], [[0, 0, 1], [1, 0], []]).reference_quality is None
    assert math.isinf(numaserve.drift.compare([[0.5]], [[float("nan")]]).max_abs)
