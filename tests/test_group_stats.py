"""Known answers for the group statistics (app/services/group_stats.py): means, sample standard deviations and
Welch's interval against values worked out here by hand, the t quantile from a printed table and from the
Student t density integrated in the test itself (not with scipy)."""

from __future__ import annotations

import math

import pytest

from app.services.group_stats import Spread, verdict, welch


def t_quantile_by_integration(p: float, dof: float) -> float:
    """Student's t quantile: the density integrated with Simpson's rule from 0, the root found by bisection."""
    c = math.gamma((dof + 1) / 2) / (math.sqrt(dof * math.pi) * math.gamma(dof / 2))

    def cdf(x: float, steps: int = 2000) -> float:
        h = x / steps
        f = [c * (1 + (i * h) ** 2 / dof) ** (-(dof + 1) / 2) for i in range(steps + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    low, high = 0.0, 50.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def test_spread_is_the_mean_the_sample_standard_deviation_and_the_count():
    spread = Spread.of([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])  # squares about the mean 5: 9+1+1+1+0+0+4+16 = 32
    assert (spread.mean, spread.n) == (5.0, 8) and spread.std == pytest.approx(math.sqrt(32 / 7), abs=1e-12)
    assert Spread.of([3.5, None]) == Spread(3.5, None, 1)
    assert Spread.of([None, float("nan")]) is None


def test_welch_with_equal_groups_matches_the_printed_t_table():
    d = welch([3.70, 3.72, 3.74], [3.71, 3.73, 3.75])
    # each variance 0.0004, standard error sqrt(2 x 0.0004 / 3); dof (2v)² / (2v² / 2) = 4; t(0.975, 4) = 2.776445
    assert d.dof == pytest.approx(4.0)
    assert d.difference == pytest.approx(0.01)
    assert d.half_width == pytest.approx(2.776445 * math.sqrt(0.0008 / 3), rel=1e-6)
    assert d.within_noise is True and d.low == pytest.approx(0.01 - d.half_width)


def test_welch_with_unequal_sizes_and_variances():
    first, second = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 9.0]
    v1, v2 = (5 / 3) / 4, 13 / 3  # variances 5/3 (squares 2.25+0.25+0.25+2.25 over 3) and 13 (9+1+16 over 2), over n
    dof = (v1 + v2) ** 2 / (v1**2 / 3 + v2**2 / 2)
    d = welch(first, second)
    assert d.difference == pytest.approx(2.5)
    assert d.dof == pytest.approx(dof) and d.dof == pytest.approx(2.388385, rel=1e-6)
    assert d.half_width == pytest.approx(t_quantile_by_integration(0.975, dof) * math.sqrt(v1 + v2), rel=1e-5)
    assert d.within_noise is True  # 2.5 against about +/- 8


def test_the_sentence_says_whether_a_difference_is_larger_than_the_noise():
    tight = welch([3.760, 3.761, 3.762], [3.700, 3.701, 3.702])
    assert verdict("H200", "CPU", "best validation loss", tight, 3, 3) == \
        "H200 - CPU best validation loss: -0.060 +/- 0.002 (3 runs each): larger than seed noise"
    single = welch([3.76], [3.70, 3.71])
    assert single.half_width is None and single.within_noise is None
    assert verdict("H200", "CPU", "best validation loss", single, 1, 2) == (
        "H200 - CPU best validation loss: -0.055 (2 and 1 runs): too few runs to tell; repeat each over 2 seeds or more")
    same = welch([3.7, 3.7], [3.7, 3.7])
    assert (same.difference, same.half_width, same.dof, same.within_noise) == (0.0, 0.0, None, True)
