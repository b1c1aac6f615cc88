"""The one per-model accuracy interval (engine.stats.multigen.proportion_interval): Clopper-Pearson for
one 0/1 score per question; with repeats or partial credit the t interval over questions, and at an
all-0 / all-1 score the exact Clopper-Pearson bound for the number of questions. Exact coverage
(binomial sums, no simulation) at and away from the boundary; every caller (summary, accuracy-ranks,
the report) gives the same interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.stats.multigen import clopper_pearson, proportion_interval, score_variance
from tests.conftest import ROOT

LM_QA = ROOT / "tests" / "data" / "harness" / "lm_eval" / "tinyqa"  # 8 questions, one 0/1 score each


def _intervals(Q: int, point_at_boundary: bool = False) -> np.ndarray:
    """(Q + 1, 2): the interval score_variance gives x correct of Q questions (one score each);
    ``point_at_boundary``: the rule two rounds before, the t interval in [0, 1] and [x/Q, x/Q] at x = 0
    and x = Q."""
    out = []
    tq = stats.t.ppf(0.975, Q - 1)
    for x in range(Q + 1):
        Y = np.zeros((Q, 1))
        Y[:x] = 1
        if point_at_boundary:
            m, se = x / Q, Y.std(ddof=1) / np.sqrt(Q)
            out.append((max(m - tq * se, 0.0), min(m + tq * se, 1.0)))
        else:
            sv = score_variance(Y, conf=0.95)
            out.append((sv["ci_low"], sv["ci_high"]))
    return np.array(out)


def exact_coverage(p: np.ndarray, Q: int, point_at_boundary: bool = False) -> np.ndarray:
    """P(p in the interval) = sum_x Binom(x; Q, p) 1{p in I(x)}, for each p."""
    I = _intervals(Q, point_at_boundary)
    pmf = stats.binom.pmf(np.arange(Q + 1)[:, None], Q, p[None, :])
    return (pmf * ((I[:, :1] <= p[None, :]) & (p[None, :] <= I[:, 1:]))).sum(axis=0)


def test_exact_tiny_case_zero_of_eight_and_all_of_eight():
    lo, hi = proportion_interval(np.zeros(8), 1, 0.95)
    assert (
        lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 8)) and hi == pytest.approx(0.3694, abs=1e-4)
    )
    assert hi == pytest.approx(stats.beta.ppf(0.975, 1, 8))  # Clopper-Pearson's own formula at x = 0
    lo, hi = proportion_interval(np.ones(8), 1, 0.95)
    assert (lo, hi) == (pytest.approx(0.025 ** (1 / 8)), 1.0)
    assert lo == pytest.approx(stats.beta.ppf(0.025, 8, 1))
    # the same bound with repeats (SE 0): valid whatever the dependence between repeats
    assert proportion_interval(np.zeros(8), 3, 0.95) == pytest.approx((0.0, 1 - 0.025 ** (1 / 8)))


def test_clopper_pearson_tiny_case():
    """2 of 8: the beta quantiles (R's binom.test(2, 8)$conf.int = 0.03185403 0.65085579)."""
    assert clopper_pearson(2, 8, 0.95) == pytest.approx((0.03185403, 0.65085579), abs=1e-8)
    assert clopper_pearson(0, 1, 0.95) == pytest.approx((0.0, 0.975))
    with pytest.raises(ValueError, match="0 <= x <= n"):
        clopper_pearson(9, 8)


def test_one_zero_one_score_per_question_gets_clopper_pearson_repeats_keep_the_t_interval():
    y = np.array([1, 1, 0, 0, 0, 0, 0, 0], dtype=float)
    assert proportion_interval(y, 1, 0.95) == pytest.approx(clopper_pearson(2, 8, 0.95))
    # repeats (the per-question means of k = 2 repeats) and partial credit: the t interval over questions
    tq = stats.t.ppf(0.975, 7)
    for p, k in (
        (np.array([1, 0.5, 0, 0, 0.5, 0, 0, 0]), 2),
        (np.array([1, 0.3, 0, 0, 0, 0, 0.7, 0]), 1),
    ):
        se = p.std(ddof=1) / np.sqrt(8)
        assert proportion_interval(p, k, 0.95) == pytest.approx(
            (max(p.mean() - tq * se, 0.0), min(p.mean() + tq * se, 1.0))
        )
    assert proportion_interval(np.array([0.5, 1.0]), 2, 0.95, crit=2.0) == pytest.approx(
        (0.25, 1.0)
    )  # a fixed critical value (score_variance's z)
    assert all(np.isnan(proportion_interval(np.array([0.5]), 2)))


def test_summary_accuracy_ranks_and_the_report_share_the_rule(tmp_db):
    """One 0/1 score per question (an lm-eval import: dummy-a 0 of 8, dummy-b 2 of 8): summary,
    accuracy-ranks and the report's headline table all carry the Clopper-Pearson interval."""
    from engine.analysis.accuracy_ranks import accuracy_ranksets
    from engine.analysis.summary import run_summary
    from engine.report.build import run_report
    from engine.report.model import with_ci
    from engine.tasks.harness_import import import_harness

    run = import_harness(tmp_db, [str(LM_QA)]).run_id
    want = {"dummy-a": clopper_pearson(0, 8), "dummy-b": clopper_pearson(2, 8)}
    s = {a.model: (a.ci_low, a.ci_high) for a in run_summary(tmp_db, run).accuracy}
    r = {m.model: (m.ci_low, m.ci_high) for m in accuracy_ranksets(tmp_db, run, n_draws=200).models}
    for m, ci in want.items():
        assert s[m] == pytest.approx(ci, abs=1e-12) and r[m] == pytest.approx(ci, abs=1e-12)
    cells = {
        c.key: c.text
        for sec in run_report(tmp_db, run).sections
        for t in [*sec.tables, *(f.table for f in sec.figures if f.table)]
        for row in t.rows
        for c in row
        if c.key
    }
    shown = with_ci(0.25, *want["dummy-b"])  # 0.250 [0.032, 0.651]
    assert cells["accuracy/dummy-b/independent"] == shown and cells["rank_acc/dummy-b"] == shown


def test_summary_benchmark_and_accuracy_ranks_share_the_rule_with_repeats():
    rng = np.random.default_rng(3)
    for Y in (np.zeros((8, 3)), np.ones((20, 2)), (rng.random((12, 4)) < 0.6).astype(float)):
        sv = score_variance(Y, conf=0.95)
        assert proportion_interval(Y.mean(axis=1), Y.shape[1], 0.95) == pytest.approx(
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


@pytest.mark.parametrize("Q", [8, 20, 40])
def test_coverage_holds_over_the_whole_range_with_one_score_per_question(Q):
    """One 0/1 score per question: the minimum exact coverage over the true accuracy (a fine grid plus
    both sides of every interval end, where the infimum sits) is at least 0.95. The t interval it
    replaces (still the rule for repeats) covered only 0.90 / 0.87 / 0.86 at 8 / 20 / 40 questions."""
    I = _intervals(Q)
    ends = I.ravel()
    p = np.unique(np.r_[np.linspace(0.0005, 0.9995, 2000), ends - 1e-9, ends + 1e-9])
    p = p[(p > 0) & (p < 1)]
    assert exact_coverage(p, Q).min() >= 0.95
