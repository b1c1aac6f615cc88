"""engine.stats.multigen: exact tiny cases, vectorised vs naive, seeded coverage, bootstrap agreement."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy.stats import t as t_dist

from engine.errors import UserError
from engine.stats import multigen as mg


def test_score_variance_exact_tiny():
    Y = np.array([[1, 0, 1], [1, 1, 1]], dtype=float)
    np.testing.assert_allclose(mg.p_correct(Y), [2 / 3, 1.0])
    r = mg.score_variance(Y)
    mu = 5 / 6
    sigma2 = ((2 / 3 - mu) ** 2 + (1 - mu) ** 2) / 1  # ddof 1 with n = 2
    pq = (2 / 3 * 1 / 3 + 0.0) / 2  # mean p(1 - p)
    assert r["mu"] == pytest.approx(mu)
    assert r["sigma2_hat"] == pytest.approx(sigma2)
    assert r["var"] == pytest.approx(sigma2 / 2)  # docs/METHODS.md 5 (amended): Var = sigma_hat^2 / n
    assert r["within"] == pytest.approx(pq * 3 / 2)
    assert r["sigma2_between"] == pytest.approx(max(0.0, sigma2 - pq / 2))
    assert r["var_within"] + r["var_between"] == pytest.approx(r["var"])  # not clipped here
    t = 12.706204736174698  # t_{1, 0.975}
    assert (
        mu - t * math.sqrt(r["var"]) < 0 < 1 < mu + t * math.sqrt(r["var"])
    )  # the t interval leaves [0, 1] ...
    assert (r["ci_low"], r["ci_high"]) == (0.0, 1.0)  # ... and is intersected with it
    assert (r["n"], r["k"], r["df"]) == (2, 3, 1)


def test_score_variance_agrees_with_variance_components_diff():
    from engine.stats import paired_difference as pdiff

    rng = np.random.default_rng(3)
    Y = (rng.random((200, 6)) < rng.beta(1, 1, (200, 1))).astype(float)
    r = mg.score_variance(Y)
    c = pdiff.variance_components_diff(Y, np.zeros_like(Y))
    assert r["within"] == pytest.approx(c["sigma2_within"])
    assert r["sigma2_between"] == pytest.approx(c["sigma2_between"])


def test_components_unbiased_and_var_not_double_counted():
    # p ~ Beta(2, 3): E[p(1-p)] = mu - mu^2 - sigma^2, sigma^2 = Var p; averaged over many data sets
    rng = np.random.default_rng(11)
    a, b = 2.0, 3.0
    mu = a / (a + b)
    s2 = a * b / ((a + b) ** 2 * (a + b + 1))
    n, k, reps = 60, 3, 3000
    Y = (rng.random((reps, n, k)) < rng.beta(a, b, (reps, n, 1))).astype(float)
    res = [mg.score_variance(Y[r]) for r in range(reps)]
    within = np.array([x["within"] for x in res])
    between = np.array([x["sigma2_between"] for x in res])
    var = np.array([x["var"] for x in res])
    true_var = (mu - mu * mu - s2) / (n * k) + s2 / n
    assert within.mean() == pytest.approx(mu - mu * mu - s2, abs=4 * within.std() / np.sqrt(reps))
    assert between.mean() == pytest.approx(s2, rel=0.05)  # clipping at 0 is rare here (s2 = 0.04)
    assert var.mean() == pytest.approx(true_var, rel=0.03)  # sigma_hat^2 / n is unbiased
    assert Y.mean(axis=(1, 2)).var(ddof=1) == pytest.approx(true_var, rel=0.08)


def test_ci_coverage_hierarchical_simulation():
    # p_i ~ Beta(2, 3) (mu = 0.4), y_ij ~ Bernoulli(p_i): the 95% CI covers mu in >= ~95% of runs
    rng = np.random.default_rng(2024)
    mu = 2 / 5
    reps, n, k = 1000, 150, 5
    p = rng.beta(2, 3, (reps, n, 1))
    Y = (rng.random((reps, n, k)) < p).astype(float)
    cover = [
        mg.score_variance(Y[r])["ci_low"] <= mu <= mg.score_variance(Y[r])["ci_high"]
        for r in range(reps)
    ]
    # binomial sd at 0.95 over 1000 runs is 0.007: allow 3 sd below nominal
    assert np.mean(cover) >= 0.93


def test_ci_of_an_imported_run_stays_in_0_1(tmp_db):
    """The case that showed [0.363, 1.137]: Inspect's mockllm/alpha, 8 questions x 2 epochs, μ̂ = 0.75."""
    from engine.analysis.multigen import multigen_summary
    from engine.tasks.harness_import import import_harness
    from tests.conftest import ROOT

    folder = ROOT / "tests" / "data" / "harness" / "inspect" / "tinyqa"
    import_harness(tmp_db, [str(p) for p in sorted(folder.iterdir())], name="h")
    sc = multigen_summary(tmp_db, "h", "mockllm/alpha", mode="independent", rule="harness").score
    assert (sc.n, sc.k, sc.mu) == (8, 2, 0.75)
    half = t_dist.ppf(0.975, 7) * sc.se
    assert sc.mu + half > 1  # the unclipped upper end
    assert sc.ci_low == pytest.approx(sc.mu - half) and sc.ci_high == 1.0


def test_clipping_the_ci_to_0_1_keeps_coverage():
    """Seeded: few prompts and μ near 1 (p_i ~ Beta(9, 1), μ = 0.9; n = 8, k = 2), where μ̂ ± t·se often
    passes 1. Each clipped interval covers μ exactly when the unclipped one does (μ is in [0, 1]),
    so the coverage is the same number; every interval lies in [0, 1]."""
    rng = np.random.default_rng(11)
    mu, reps, n, k = 0.9, 2000, 8, 2
    Y = (rng.random((reps, n, k)) < rng.beta(9, 1, (reps, n, 1))).astype(float)
    rs = [mg.score_variance(Y[r]) for r in range(reps)]
    lo, hi = np.array([r["ci_low"] for r in rs]), np.array([r["ci_high"] for r in rs])
    # the unclipped t interval, written out (vectorised over replications)
    p = Y.mean(axis=2)  # (reps, n)
    m, se = p.mean(axis=1), p.std(axis=1, ddof=1) / np.sqrt(n)
    t = t_dist.ppf(0.975, n - 1)
    raw_lo, raw_hi = m - t * se, m + t * se
    assert (raw_hi > 1).mean() > 0.3  # the case is exercised often
    # an all-1 sample (SE 0) gets the exact Clopper-Pearson interval for n questions instead of [1, 1]
    # (stats.multigen.proportion_interval; tests/test_proportion_interval.py)
    edge = m == 1.0
    assert 0 < edge.mean() < 0.5
    np.testing.assert_allclose(lo[~edge], np.maximum(raw_lo, 0.0)[~edge], rtol=0, atol=1e-12)
    np.testing.assert_allclose(hi[~edge], np.minimum(raw_hi, 1.0)[~edge], rtol=0, atol=1e-12)
    assert np.all(lo[edge] == pytest.approx(0.025 ** (1 / n))) and np.all(hi[edge] == 1.0)
    assert lo.min() >= 0.0 and hi.max() <= 1.0
    cover, raw_cover = (lo <= mu) & (mu <= hi), (raw_lo <= mu) & (mu <= raw_hi)
    assert np.array_equal(cover[~edge], raw_cover[~edge]) and cover.mean() > raw_cover.mean()


def test_scores_outside_0_1_are_not_clipped():
    """A metric on another scale (here 0..5) is no probability: its interval is left as it is."""
    Y = np.array([[5, 0], [5, 5], [0, 5]], dtype=float)
    r = mg.score_variance(Y)
    half = t_dist.ppf(0.975, 2) * r["se"]
    assert r["mu"] - half < 0
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((r["mu"] - half, r["mu"] + half))


def test_lemma_2_1_variance_matches_simulation():
    # the decomposition's true value (μ − μ² − σ²)/(nk) + σ²/n against the empirical Var(μ̂)
    rng = np.random.default_rng(4)
    a, b = 2.0, 3.0
    mu = a / (a + b)
    sigma2 = a * b / ((a + b) ** 2 * (a + b + 1))
    n, k, reps = 80, 4, 20000
    p = rng.beta(a, b, (reps, n, 1))
    mus = (rng.random((reps, n, k)) < p).mean(axis=(1, 2))
    theory = (mu - mu**2 - sigma2) / (n * k) + sigma2 / n
    assert mus.var(ddof=1) == pytest.approx(theory, rel=0.05)


def test_variance_ci_agrees_with_bootstrap_over_prompts():
    rng = np.random.default_rng(8)
    p = rng.beta(0.7, 0.7, (500, 1))  # mass near 0 and 1, like real benchmarks
    Y = (rng.random((500, 10)) < p).astype(float)
    a = mg.score_variance(Y)
    b = mg.bootstrap_score_ci(Y, np.random.default_rng(1), n_resamples=4000)
    assert b["se"] == pytest.approx(a["se"], rel=0.1)
    assert b["ci_low"] == pytest.approx(a["ci_low"], abs=0.3 * a["se"])
    assert b["ci_high"] == pytest.approx(a["ci_high"], abs=0.3 * a["se"])


def test_single_generation_scores():
    Y = np.array([[1, 0, 1, 1], [0, 0, 1, 1], [1, 0, 0, 1]], dtype=float)
    r = mg.single_generation_scores(Y)
    np.testing.assert_allclose(r["scores"], [2 / 3, 0, 2 / 3, 1])
    assert (r["best"], r["worst"], r["spread"]) == (1.0, 0.0, 1.0)
    # the mean of the single-run scores is the benchmark score
    assert np.mean(r["scores"]) == pytest.approx(mg.score_variance(Y)["mu"])


def _consistency_naive(C) -> np.ndarray:
    out = []
    for row in C:
        k = len(row)
        out.append(sum((c / k) * math.log(c / k) for c in Counter(row.tolist()).values()))
    return np.array(out)


def test_semantic_consistency_exact_and_vs_naive():
    C = np.array([[3, 3, 3, 3], [0, 1, 2, 3], [5, 5, 7, 7], [9, 1, 9, 9]])
    np.testing.assert_allclose(
        mg.semantic_consistency(C),
        [0.0, -math.log(4), math.log(0.5), 0.75 * math.log(0.75) + 0.25 * math.log(0.25)],
        atol=1e-12,
    )
    rng = np.random.default_rng(0)
    C = rng.integers(-3, 4, (500, 10))  # arbitrary ids, negative too
    np.testing.assert_allclose(mg.semantic_consistency(C), _consistency_naive(C), atol=1e-12)


def test_data_map_flags():
    p = np.array([0.0, 0.1, 0.1, 0.5, 0.05])
    S = np.array([0.0, -0.8, -0.9, 0.0, -0.5])
    np.testing.assert_array_equal(mg.data_map_flags(p, S), [True, True, False, False, True])
    np.testing.assert_array_equal(
        mg.data_map_flags(p, S, p_max=0.0, s_min=-1.0), [True, False, False, False, False]
    )


def test_bad_input_errors():
    with pytest.raises(UserError, match="shape"):
        mg.p_correct(np.zeros(5))
    with pytest.raises(UserError, match="NaN"):
        mg.score_variance(np.array([[1.0, np.nan]]))
    with pytest.raises(UserError, match="shape"):
        mg.semantic_consistency(np.zeros((0, 3)))
    with pytest.raises(UserError, match="same shape"):
        mg.data_map_flags(np.zeros(3), np.zeros(4))
    with pytest.raises(UserError, match="p_max"):
        mg.data_map_flags(np.zeros(3), np.zeros(3), p_max=2)
    with pytest.raises(UserError, match="s_min"):
        mg.data_map_flags(np.zeros(3), np.zeros(3), s_min=0.5)


def test_largest_answer_cluster_vectorised_vs_loop():
    from engine.stats.multigen import largest_answer_cluster

    rng = np.random.default_rng(3)
    C = rng.integers(0, 4, size=(200, 7))
    A = rng.random((200, 7)) < 0.6
    naive = [
        max([sum(1 for j in range(7) if C[i, j] == c and A[i, j]) for c in set(C[i])] + [0])
        for i in range(200)
    ]
    assert largest_answer_cluster(C, A).tolist() == naive
    assert largest_answer_cluster([[1, 1, 2]], [[False, False, True]]).tolist() == [1]
