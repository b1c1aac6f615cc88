"""The one per-model accuracy interval (engine.stats.multigen.proportion_interval): the t interval over
questions, and at an all-0 / all-1 score the exact Clopper-Pearson bound for the number of questions.
Exact coverage (binomial sums, no simulation) at and away from the boundary."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.analysis.accuracy_ranks import accuracy_interval
from engine.stats.multigen import proportion_interval, score_variance


def _intervals(Q: int, point_at_boundary: bool = False) -> np.ndarray:
    """(Q + 1, 2): the interval score_variance gives x correct of Q questions (one score each);
    ``point_at_boundary``: the rule before, [x/Q, x/Q] at x = 0 and x = Q."""
    out = []
    for x in range(Q + 1):
        Y = np.zeros((Q, 1))
        Y[:x] = 1
        sv = score_variance(Y, conf=0.95)
        lo, hi = (x / Q, x / Q) if point_at_boundary and x in (0, Q) else (sv["ci_low"], sv["ci_high"])
        out.append((lo, hi))
    return np.array(out)


def exact_coverage(p: np.ndarray, Q: int, point_at_boundary: bool = False) -> np.ndarray:
    """P(p in the interval) = sum_x Binom(x; Q, p) 1{p in I(x)}, for each p."""
    I = _intervals(Q, point_at_boundary)
    pmf = stats.binom.pmf(np.arange(Q + 1)[:, None], Q, p[None, :])
    return (pmf * ((I[:, :1] <= p[None, :]) & (p[None, :] <= I[:, 1:]))).sum(axis=0)


def test_exact_tiny_case_zero_of_eight_and_all_of_eight():
    lo, hi = proportion_interval(0.0, 0.0, 2.36, 8, 0.95)
    assert (
        lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 8)) and hi == pytest.approx(0.3694, abs=1e-4)
    )
    assert hi == pytest.approx(stats.beta.ppf(0.975, 1, 8))  # Clopper-Pearson's own formula at x = 0
    lo, hi = proportion_interval(1.0, 0.0, 2.36, 8, 0.95)
    assert (lo, hi) == (pytest.approx(0.025 ** (1 / 8)), 1.0)
    assert lo == pytest.approx(stats.beta.ppf(0.025, 8, 1))
    assert proportion_interval(0.5, 0.1, 2.0, 8) == (pytest.approx(0.3), pytest.approx(0.7))


def test_summary_benchmark_and_accuracy_ranks_share_the_rule():
    rng = np.random.default_rng(3)
    for Y in (np.zeros((8, 3)), np.ones((20, 2)), (rng.random((12, 4)) < 0.6).astype(float)):
        sv = score_variance(Y, conf=0.95)
        tq = stats.t.ppf(0.975, Y.shape[0] - 1)
        assert accuracy_interval(Y.mean(axis=1), tq, 0.95) == pytest.approx(
            (sv["ci_low"], sv["ci_high"])
        )
    assert score_variance(np.zeros((8, 2)))["ci_high"] == pytest.approx(0.3694, abs=1e-4)


@pytest.mark.parametrize("Q, before", [(8, 0.34), (20, 0.64), (40, 0.87)])
def test_exact_coverage_at_the_boundary(Q, before):
    p = np.linspace(0.0005, 0.3, 600)
    I0 = _intervals(Q)[0]
    miss_at_zero = stats.binom.pmf(0, Q, p) * ~((I0[0] <= p) & (p <= I0[1]))
    assert miss_at_zero.max() <= 0.025 + 1e-12  # the all-0 interval misses with probability <= alpha/2
    IQ = _intervals(Q)[Q]
    miss_at_one = stats.binom.pmf(Q, Q, 1 - p) * ~((IQ[0] <= 1 - p) & (1 - p <= IQ[1]))
    assert miss_at_one.max() <= 0.025 + 1e-12
    # the point [0, 0] it replaces: the figures at a true accuracy of 0.05
    assert exact_coverage(np.array([0.05]), Q, point_at_boundary=True)[0] == pytest.approx(
        before, abs=0.005
    )
    assert exact_coverage(np.array([0.05]), Q)[0] >= 0.95


@pytest.mark.parametrize("Q, low, high", [(8, 0.89, 0.91), (20, 0.86, 0.87), (40, 0.85, 0.87)])
def test_minimum_exact_coverage_away_from_the_boundary_is_what_the_warning_says(Q, low, high):
    """The t interval of 0/1 scores is approximate: its minimum exact coverage over p in [0.01, 0.99]
    (the small-sample warning quotes 0.86-0.90 at 8-40 questions)."""
    c = exact_coverage(np.linspace(0.01, 0.99, 981), Q)
    assert low <= c.min() <= high
