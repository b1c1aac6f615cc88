"""engine/stats/judge_bias.py: length bias, self-preference and drift: exact tiny cases, naive loops
(Stuart-Maxwell and McNemar as textbook formulas), and seeded simulations of the clustered intervals'
coverage and of the drift test's size and power."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from engine.stats import judge_audit as ja
from engine.stats import judge_bias as jb


def _sum(F):
    return F.sum(axis=0)


def test_length_bias_exact_tiny_case():
    # lengths a/b: (10, 5) a longer; (3, 9) b longer; (4, 4) equal (left out); (8, 2) a longer, no human
    longer = jb.longer_side([10, 3, 4, 8], [5, 9, 4, 2])
    assert longer.tolist() == [0, 1, -1, 0]
    judge = np.array([0, 1, 0, 2])  # picks the longer on units 1, 2; tie on 4
    human = np.array([1, 1, 0, -1])  # picks the longer on unit 2 only
    out = jb.length_bias_of_sums(_sum(jb.length_features(judge, human, longer)))
    np.testing.assert_allclose(out, [2 / 2, 1 / 2, 0.5, 2 / 3])


def test_length_bins_are_quantiles_of_the_nonzero_gaps():
    edges = jb.length_bins(np.array([0, 1, 2, 3, 4, np.nan, 5, 6, 7, 8]), 4)
    np.testing.assert_allclose(edges, np.quantile([1, 2, 3, 4, 5, 6, 7, 8], [0, 0.25, 0.5, 0.75, 1]))
    assert jb.length_bins(np.array([0.0, np.nan])).size == 0


def test_self_preference_exact_and_naive():
    rng = np.random.default_rng(4)
    k, n = 4, 500
    first = rng.integers(0, k, n)
    second = (first + rng.integers(1, k, n)) % k
    j, h = rng.integers(-1, 3, n), rng.integers(-1, 3, n)
    S = _sum(ja.bias_features(first, second, j, h, k))
    for s in range(k):
        b = []
        for m in range(k):  # naive: the judge's strict win-rate of m minus the humans' on the same units
            rows = [i for i in range(n) if (first[i] == m or second[i] == m) and j[i] >= 0 and h[i] >= 0]
            jw = sum((j[i] == 0 and first[i] == m) or (j[i] == 1 and second[i] == m) for i in rows)
            hw = sum((h[i] == 0 and first[i] == m) or (h[i] == 1 and second[i] == m) for i in rows)
            b.append((jw - hw) / len(rows))
        others = np.mean([b[m] for m in range(k) if m != s])
        np.testing.assert_allclose(jb.self_preference_of_sums(S, s), [b[s], others, b[s] - others])


def _stuart_maxwell(x, y):
    """Textbook Stuart-Maxwell over 3 categories (the first two coordinates) from the 3 x 3 table."""
    t = np.zeros((3, 3))
    for a, b in zip(x, y):
        t[a, b] += 1
    d = (t.sum(1) - t.sum(0))[:2]
    V = np.array(
        [
            [t[0].sum() + t[:, 0].sum() - 2 * t[0, 0], -(t[0, 1] + t[1, 0])],
            [-(t[0, 1] + t[1, 0]), t[1].sum() + t[:, 1].sum() - 2 * t[1, 1]],
        ]
    )
    stat = float(d @ np.linalg.solve(V, d))
    return stat, st.chi2.sf(stat, 2)


def test_drift_test_is_stuart_maxwell_and_mcnemar_with_one_unit_per_prompt():
    rng = np.random.default_rng(9)
    n = 300
    x = rng.integers(0, 3, n)
    y = np.where(rng.random(n) < 0.7, x, rng.integers(0, 3, n))
    stat, df, p = jb.marginal_homogeneity_test(x, y, np.arange(n), n)
    ref_stat, ref_p = _stuart_maxwell(x, y)
    assert df == 2 and stat == pytest.approx(ref_stat) and p == pytest.approx(ref_p)
    # two categories: McNemar (b - c)^2 / (b + c), 1 degree of freedom
    xb, yb = rng.integers(0, 2, n), rng.integers(0, 2, n)
    b, c = int(((xb == 0) & (yb == 1)).sum()), int(((xb == 1) & (yb == 0)).sum())
    stat, df, p = jb.marginal_homogeneity_test(xb, yb, np.arange(n), n)
    assert df == 1 and stat == pytest.approx((b - c) ** 2 / (b + c))
    assert p == pytest.approx(st.chi2.sf((b - c) ** 2 / (b + c), 1))
    assert jb.marginal_homogeneity_test(x, x, np.arange(n), n) == (0.0, 0, 1.0)
    assert jb.marginal_homogeneity_test(np.array([-1]), np.array([0]), np.array([0]), 1)[0] is None


def test_drift_figures_exact_tiny_case():
    F = jb.drift_features(np.array([0, 0, 1, 2, -1]), np.array([0, 1, 1, 0, 0]))
    np.testing.assert_allclose(jb.drift_of_sums(_sum(F)), [2 / 4, 0.0, 1 / 4, -1 / 4])


def _clustered_verdicts(rng, C, per, shift):
    """Prompts with a shared propensity for a; two judgings drawn independently given it (a judge at
    temperature > 0: verdicts change without drift); ``shift`` moves the second judging towards a."""
    p = rng.beta(2, 2, C)
    p1 = np.repeat(p, per)
    p2 = np.clip(p1 + shift, 0, 1)
    u1, u2 = rng.random(C * per), rng.random(C * per)
    first = np.where(u1 < 0.15, 2, np.where(rng.random(C * per) < p1, 0, 1))
    second = np.where(u2 < 0.15, 2, np.where(rng.random(C * per) < p2, 0, 1))
    return first, second, np.repeat(np.arange(C), per)


def test_drift_test_size_and_power_under_prompt_clustering():
    """Seeded: 60 prompts x 5 units, verdicts clustered by prompt. No drift: the test rejects at 5% in
    0.05 +- 3.5 MC s.e. of 400 replications (a per-unit Stuart-Maxwell ignores the clusters); a shift of
    0.15 towards a is found in > 80%."""
    rng = np.random.default_rng(31)
    C, per, reps = 60, 5, 400
    rej0 = rej1 = 0
    for _ in range(reps):
        f, s, cl = _clustered_verdicts(rng, C, per, 0.0)
        rej0 += jb.marginal_homogeneity_test(f, s, cl, C)[2] < 0.05
        f, s, cl = _clustered_verdicts(rng, C, per, 0.15)
        rej1 += jb.marginal_homogeneity_test(f, s, cl, C)[2] < 0.05
    assert abs(rej0 / reps - 0.05) < 3.5 * np.sqrt(0.05 * 0.95 / reps)
    assert rej1 / reps > 0.8


def test_length_and_drift_intervals_cover():
    """Seeded: the 90% clustered intervals of the judge-minus-human length-bias difference and of the
    drift's changed share cover their population values in 0.90 +- 3.5 MC s.e. of 200 replications.
    Per prompt, the probability that the judge (human) picks the longer response is p_c + 0.1 (p_c)."""
    rng = np.random.default_rng(77)
    C, per, reps, conf = 50, 6, 200, 0.90
    cover = np.zeros(2)
    for _ in range(reps):
        p = rng.uniform(0.3, 0.7, C).repeat(per)
        longer = rng.integers(0, 2, C * per)
        hp = rng.random(C * per) < p
        jp = rng.random(C * per) < p + 0.1
        human = np.where(hp, longer, 1 - longer)
        judge = np.where(jp, longer, 1 - longer)
        cl = np.repeat(np.arange(C), per)
        W = ja.bootstrap_weights(C, 400, rng)
        S = ja.cluster_sums(jb.length_features(judge, human, longer), cl, C)
        iv = ja.interval(S, W, jb.length_bias_of_sums, conf)
        cover[0] += iv.lower[2] <= 0.1 <= iv.upper[2]
        f, s, _ = _clustered_verdicts(rng, C, per, 0.0)
        ivd = ja.interval(ja.cluster_sums(jb.drift_features(f, s), cl, C), W, jb.drift_of_sums, conf)
        cover[1] += ivd.lower[0] <= DRIFT_TRUTH <= ivd.upper[0]
    rate = cover / reps
    assert np.all(np.abs(rate - conf) < 3.5 * np.sqrt(conf * (1 - conf) / reps)), rate


# P(first != second) in _clustered_verdicts without shift: with q = (0.85 p, 0.85 (1 - p), 0.15) and
# p ~ Beta(2, 2): 1 - E[Σ q_c²] = 1 - 0.85² E[p² + (1 - p)²] - 0.15², E[p²] = Var + mean² = 0.05 + 0.25
DRIFT_TRUTH = 1 - 0.85**2 * (2 * 0.30) - 0.15**2
