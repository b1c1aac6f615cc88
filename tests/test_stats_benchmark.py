"""engine.stats.benchmark: exact tiny cases, vectorised vs naive, seeded simulations of guarantees."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.errors import UserError
from engine.stats import benchmark as bm
from engine.stats import paired_difference as pdiff
from engine.stats import planning, saving

# 2 questions x 3 repeats, hand-computed below.
A = np.array([[1, 0, 1], [1, 1, 1]], dtype=float)
B = np.array([[1, 0, 0], [0, 1, 0]], dtype=float)


def test_covariance_and_var_diff_exact_tiny():
    # q1: A = (1,0,1), mean 2/3; B = (1,0,0), mean 1/3; products of deviations 2/9, 2/9, -1/9 -> 1/3, /2 = 1/6
    # q2: A constant -> covariance 0
    np.testing.assert_allclose(bm.per_question_covariance(A, B), [1 / 6, 0.0])
    # q1: D = (0,0,1): mean 1/3, squares 1/9 + 1/9 + 4/9 = 2/3, /2 = 1/3;  q2: D = (1,0,1) -> 1/3
    np.testing.assert_allclose(bm.per_question_var_diff(A, B), [1 / 3, 1 / 3])


def test_var_diff_identity_on_same_data():
    # Var(A - B) = Var(A) + Var(B) - 2 Cov(A, B), per question, exactly (ddof 1 throughout)
    rng = np.random.default_rng(1)
    X = rng.integers(0, 2, (50, 10)).astype(float)
    Y = rng.integers(0, 2, (50, 10)).astype(float)
    lhs = bm.per_question_var_diff(X, Y)
    rhs = X.var(axis=1, ddof=1) + Y.var(axis=1, ddof=1) - 2 * bm.per_question_covariance(X, Y)
    np.testing.assert_allclose(lhs, rhs, atol=1e-12)
    # and the covariance matches numpy's per row
    np.testing.assert_allclose(
        bm.per_question_covariance(X, Y)[:5], [np.cov(X[i], Y[i])[0, 1] for i in range(5)]
    )


def _simulate(rng, Q, R, coupled):
    """Two models with per-question accuracies; coupled = one shared uniform per (q, r)."""
    pa = rng.beta(2, 2, Q)[:, None]
    pb = np.clip(pa - 0.15 + 0.1 * rng.standard_normal((Q, 1)), 0, 1)
    u = rng.random((Q, R))
    v = u if coupled else rng.random((Q, R))
    return (u < pa).astype(float), (v < pb).astype(float), pa, pb


def test_proposition_1_on_simulated_data():
    # Var_indep(R_a - R_b) - 2 Cov_coupled(R_a, R_b) = Var_coupled(R_a - R_b) in expectation:
    # same per-question accuracies, coupled vs independent noise, averaged over many questions.
    rng = np.random.default_rng(7)
    Q, R = 4000, 10
    pa = rng.beta(2, 2, Q)[:, None]
    pb = np.clip(pa - 0.15 + 0.1 * rng.standard_normal((Q, 1)), 0, 1)
    u, v, w = rng.random((3, Q, R))
    Ac, Bc = (u < pa).astype(float), (u < pb).astype(float)
    Ai, Bi = (v < pa).astype(float), (w < pb).astype(float)
    var_c = bm.per_question_var_diff(Ac, Bc).mean()
    var_i = bm.per_question_var_diff(Ai, Bi).mean()
    cov_c = bm.per_question_covariance(Ac, Bc).mean()
    # exact expectations: E Var_i = E[pa(1-pa) + pb(1-pb)], E Cov = E[min(pa,pb) - pa pb]
    exp_cov = float((np.minimum(pa, pb) - pa * pb).mean())
    assert cov_c == pytest.approx(exp_cov, abs=0.004)
    assert var_i - 2 * cov_c == pytest.approx(var_c, abs=0.01)
    assert var_c < var_i


def test_error_curve_vectorised_equals_naive_loop():
    rng = np.random.default_rng(3)
    diff = rng.integers(-1, 2, 300).astype(float)
    sizes = bm.default_sizes(diff.size, step=20)
    perms = bm.resample_permutations(diff.size, 200, rng)
    fast = bm.error_curve(diff, sizes, perms)
    slow = bm.error_curve_naive(diff, sizes, perms)
    assert fast["n"] == slow["n"]
    for key in ("mean", "low", "high"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=0, atol=1e-12)
    # without replacement, n = N gives zero error
    assert fast["mean"][-1] == pytest.approx(0.0, abs=1e-12)


def test_permutations_are_permutations_and_prefix_uniform():
    rng = np.random.default_rng(0)
    perms = bm.resample_permutations(7, 5000, rng)
    assert (np.sort(perms, axis=1) == np.arange(7)).all()
    # every item is first with probability 1/7
    freq = np.bincount(perms[:, 0], minlength=7) / 5000
    assert np.abs(freq - 1 / 7).max() < 0.03
    # short prefixes of a big pool take the O(length) path: distinct items, uniform positions
    short = bm.resample_permutations(1000, 3000, rng, length=5)
    assert short.shape == (3000, 5)
    assert all(len(set(row)) == 5 for row in short.tolist())
    assert np.abs(np.bincount(short[:, 4] // 100, minlength=10) / 3000 - 0.1).max() < 0.03
    with pytest.raises(UserError, match="length"):
        bm.resample_permutations(10, 2, rng, length=11)


def test_error_curve_matches_sampling_theory():
    # Mean error of a without-replacement mean vs E|N(0, s^2 (N-n)/(N-1) / n)| = sd sqrt(2/pi)
    rng = np.random.default_rng(11)
    diff = rng.integers(-1, 2, 2000).astype(float)
    N = diff.size
    sizes = np.array([100, 400])
    perms = bm.resample_permutations(N, 4000, rng, length=400)
    curve = bm.error_curve(diff, sizes, perms)
    s2 = diff.var()
    for n, e in zip(sizes, curve["mean"]):
        sd = math.sqrt(s2 / n * (N - n) / (N - 1))
        assert e == pytest.approx(sd * saving.MAE_PER_SE, rel=0.05)


def test_default_sizes():
    assert bm.default_sizes(1000).tolist() == list(range(20, 1001, 20))
    assert bm.default_sizes(24).tolist() == list(range(2, 25, 2))  # tiny pools: step N // 10
    big = bm.default_sizes(140_420)
    assert len(big) <= 500 and big[0] % 20 == 0 and np.all(np.diff(big) == big[0])


def test_samples_for_error_and_saving_exact():
    sizes = [20, 40, 60, 80]
    err_c = [0.10, 0.06, 0.04, 0.03]
    err_i = [0.14, 0.10, 0.08, 0.05]
    # coupled reaches 0.05 between 40 (0.06) and 60 (0.04): 40 + 0.01/0.02*20 = 50
    assert saving.samples_for_error(sizes, err_c, 0.05) == pytest.approx(50.0)
    assert saving.samples_for_error(sizes, err_i, 0.05) == pytest.approx(80.0)
    s = saving.sample_saving(sizes, err_c, err_i, 0.05)
    assert s["saving"] == pytest.approx(1 - 50 / 80)
    assert (
        not s["at_smallest_size"] and saving.sample_saving(sizes, err_c, err_i, 0.12)["at_smallest_size"]
    )
    assert saving.samples_for_error(sizes, err_c, 0.001) is None
    assert saving.sample_saving(sizes, err_c, err_i, 0.001)["saving"] is None
    assert saving.error_at(sizes, err_c, 50) == pytest.approx(0.05)


def test_mcnemar_exact_and_chi2():
    a = np.array([1, 1, 1, 0, 1, 0])
    b = np.array([0, 0, 0, 0, 1, 0])
    r = pdiff.mcnemar(a, b)
    assert (r["n10"], r["n01"], r["method"]) == (3, 0, "exact")
    assert r["p_value"] == pytest.approx(2 * 0.5**3)
    # large discordant counts: chi2 with continuity correction agrees with the exact binomial
    rng = np.random.default_rng(2)
    x = rng.random(3000) < 0.6
    y = rng.random(3000) < 0.55
    chi = pdiff.mcnemar(x, y)
    exact = pdiff.mcnemar(x, y, exact_below=10**9)
    assert chi["method"] == "chi2" and exact["method"] == "exact"
    assert chi["p_value"] == pytest.approx(exact["p_value"], rel=0.1, abs=1e-4)
    assert pdiff.mcnemar(a, a)["p_value"] == 1.0


def test_mcnemar_level_under_null():
    # seeded simulation: under H0 (exchangeable pairs) the exact test rejects at most ~5%
    rng = np.random.default_rng(5)
    rejections = 0
    for _ in range(400):
        p = rng.random(60)
        x = rng.random(60) < p
        y = rng.random(60) < p
        rejections += pdiff.mcnemar(x, y)["p_value"] < 0.05
    assert rejections / 400 <= 0.07


def test_paired_bootstrap_diff():
    rng = np.random.default_rng(0)
    Ac, Bc, pa, pb = _simulate(rng, 300, 10, coupled=True)
    r = pdiff.paired_bootstrap_diff(Ac, Bc, np.random.default_rng(1), n_resamples=2000)
    assert r["diff"] == pytest.approx((Ac - Bc).mean())
    assert r["ci_low"] < r["diff"] < r["ci_high"]
    # the bootstrap se agrees with the cluster (per-question) standard error
    d = (Ac - Bc).mean(axis=1)
    assert r["se"] == pytest.approx(d.std(ddof=1) / math.sqrt(d.size), rel=0.1)


def test_variance_components_and_planner_match_simulation():
    # Var(mean diff over n questions x k repeats) = sb/n + sw/(n k): the components estimated on one
    # simulated benchmark predict the variance of the mean over fresh benchmarks of another shape.
    rng = np.random.default_rng(9)
    Ac, Bc, _, _ = _simulate(rng, 2000, 10, coupled=True)
    comp = pdiff.variance_components_diff(Ac, Bc)
    n, k, M = 100, 4, 3000
    pa = rng.beta(2, 2, (M, n, 1))
    pb = np.clip(pa - 0.15 + 0.1 * rng.standard_normal((M, n, 1)), 0, 1)
    u = rng.random((M, n, k))
    means = ((u < pa).astype(float) - (u < pb)).mean(axis=(1, 2))  # (M,)
    predicted = comp["sigma2_between"] / n + comp["sigma2_within"] / (n * k)
    assert np.var(means, ddof=1) == pytest.approx(predicted, rel=0.1)
    plan = planning.plan_sample_size(
        comp["sigma2_between"], comp["sigma2_within"], target_se=0.02, repeats=(1, 4)
    )
    for row in plan:
        se = math.sqrt(
            (comp["sigma2_between"] + comp["sigma2_within"] / row["repeats"]) / row["questions"]
        )
        assert se <= 0.02
        se_one_less = math.sqrt(
            (comp["sigma2_between"] + comp["sigma2_within"] / row["repeats"])
            / max(row["questions"] - 1, 1)
        )
        assert row["questions"] == 1 or se_one_less > 0.02
    # target error -> target se = error / sqrt(2/pi)
    by_err = planning.plan_sample_size(0.1, 0.2, target_error=0.02 * saving.MAE_PER_SE, repeats=(1,))
    assert by_err == planning.plan_sample_size(0.1, 0.2, target_se=0.02, repeats=(1,))


def test_kde_curve_regular_and_degenerate():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 500)
    c = bm.kde_curve(x, n_grid=400)
    assert not c["degenerate"]
    assert np.trapezoid(c["density"], c["x"]) == pytest.approx(1.0, abs=0.01)
    d = bm.kde_curve(np.full(20, 0.2))  # all equal: no crash, a narrow bump at 0.2
    assert d["degenerate"]
    assert d["x"][int(np.argmax(d["density"]))] == pytest.approx(0.2, abs=0.01)
    assert np.trapezoid(d["density"], d["x"]) == pytest.approx(1.0, abs=0.01)
    assert bm.kde_curve([0.3])["degenerate"]


def test_bad_input_errors():
    with pytest.raises(UserError, match="shape"):
        bm.per_question_covariance(np.zeros((2, 3)), np.zeros((3, 3)))
    with pytest.raises(UserError, match="2 repeats"):
        bm.per_question_var_diff(np.zeros((4, 1)), np.zeros((4, 1)))
    with pytest.raises(UserError, match="NaN"):
        bm.per_question_covariance(np.array([[np.nan, 1.0]]), np.array([[0.0, 1.0]]))
    with pytest.raises(UserError, match="sample sizes"):
        bm.error_curve(np.zeros(10), [5, 20], bm.resample_permutations(10, 3, np.random.default_rng(0)))
    with pytest.raises(UserError, match="exactly one"):
        planning.plan_sample_size(0.1, 0.1)
    with pytest.raises(UserError, match="> 0"):
        planning.plan_sample_size(0.1, 0.1, target_error=-1)
    with pytest.raises(UserError, match="no values"):
        bm.kde_curve([])


# ---- boundary-corrected KDE (a variance is never negative) -------------------------------------


def test_kde_reflected_at_zero_integrates_to_one_and_is_zero_below():
    rng = np.random.default_rng(3)
    x = np.concatenate([np.zeros(30), rng.gamma(2.0, 0.05, 70)])  # mass at and near 0, like Var(diff)
    grid = np.linspace(-0.5, 1.5, 8001)
    c = bm.kde_curve(x, grid=grid, lower=0.0)
    g, f = np.array(c["x"]), np.array(c["density"])
    assert (f[g < 0] == 0).all() and (f >= 0).all()
    assert np.trapezoid(f[g >= 0], g[g >= 0]) == pytest.approx(1.0, abs=2e-3)
    # the plain KDE puts mass below 0 (the bug this fixes), and reflection keeps the shape above 0
    plain = np.array(bm.kde_curve(x, grid=grid)["density"])
    assert np.trapezoid(plain[g < 0], g[g < 0]) > 0.05
    above = g >= 2 * c["bandwidth"] * 4
    np.testing.assert_allclose(
        f[above], plain[above], atol=1e-6
    )  # far from 0 the reflection adds ~nothing
    # default grid starts at the bound; degenerate data (all 0) too
    assert bm.kde_curve(x, lower=0.0)["x"][0] == 0.0
    d = bm.kde_curve(np.zeros(10), grid=grid, lower=0.0)
    dd = np.array(d["density"])
    assert d["degenerate"] and (dd[g < 0] == 0).all()
    assert np.trapezoid(dd[g >= 0], g[g >= 0]) == pytest.approx(1.0, abs=2e-3)
    with pytest.raises(UserError, match="below the lower bound"):
        bm.kde_curve([-0.1, 0.2], lower=0.0)


# ---- sample saving predicted from the variances, with its bootstrap interval -------------------


def test_saving_predicted_exact_tiny():
    Dc = np.array([[0, 0], [1, 0]], float)  # S² = var([0, 0, 1, 0], ddof 1) = 0.25
    Di = np.array([[1, -1], [1, 0]], float)  # S² = var([1, -1, 1, 0], ddof 1) = 11/12
    eps = 0.1
    r = saving.saving_predicted(Dc, Di, eps)
    s2 = (eps / math.sqrt(2 / math.pi)) ** 2
    nc, ni = 0.25 * 4 / (s2 * 4 + 0.25), (11 / 12) * 4 / (s2 * 4 + 11 / 12)
    assert (r["s2_coupled"], r["N"]) == (pytest.approx(0.25), 4)
    assert r["s2_independent"] == pytest.approx(11 / 12)
    assert r["n_coupled"] == pytest.approx(nc) and r["n_independent"] == pytest.approx(ni)
    assert r["saving"] == pytest.approx(1 - nc / ni)
    assert r["ci_low"] is None and r["n_resamples"] == 0  # no rng: no interval
    with pytest.raises(UserError, match="must be > 0"):
        saving.saving_predicted(Dc, Di, 0.0)
    with pytest.raises(UserError, match="one shape"):
        saving.saving_predicted(Dc, Di[:1], 0.1)


def _coupled_pair(rng, Q, R):
    """Questions with accuracies pA, pB; coupled = one shared uniform per (question, repeat)."""
    pa, pb = rng.beta(2, 2, Q), rng.beta(2, 3, Q)
    u, v, w = rng.random((3, Q, R))
    Dc = (u < pa[:, None]).astype(float) - (u < pb[:, None])
    Di = (v < pa[:, None]).astype(float) - (w < pb[:, None])
    return Dc, Di


def test_saving_predicted_agrees_with_the_resampling_curves():
    # two implementations: the variance formula vs interpolation on the simulated error curves
    rng = np.random.default_rng(11)
    Dc, Di = _coupled_pair(rng, 300, 10)
    N = Dc.size
    sizes = bm.default_sizes(N)
    perms = bm.resample_permutations(N, 4000, rng, length=int(sizes.max()))
    ec, ei = (bm.error_curve(D.ravel(), sizes, perms)["mean"] for D in (Dc, Di))
    for n in (
        60,
        200,
        600,
        1500,
    ):  # measured: n within 3%, saving within 0.013 (Monte Carlo noise of the curves)
        eps = saving.error_at(sizes, ec, n)
        curve = saving.sample_saving(sizes, ec, ei, eps)
        pred = saving.saving_predicted(Dc, Di, eps)
        assert pred["n_coupled"] == pytest.approx(curve["n_coupled"], rel=0.05)
        assert pred["n_independent"] == pytest.approx(curve["n_independent"], rel=0.05)
        assert pred["saving"] == pytest.approx(curve["saving"], abs=0.03)


def test_saving_predicted_interval_covers_the_population_saving():
    # seeded simulation of the guarantee: the bootstrap-over-questions CI covers the saving at ε
    # computed from the population per-sample variances (Monte Carlo with 2e6 draws)
    rng = np.random.default_rng(5)
    Q, R, eps = 150, 5, 0.03
    pa, pb = rng.beta(2, 2, 2_000_000), rng.beta(2, 3, 2_000_000)
    s2c = np.mean(np.abs(pa - pb)) - np.mean(pa - pb) ** 2
    s2i = np.mean(pa * (1 - pb) + pb * (1 - pa)) - np.mean(pa - pb) ** 2
    nc, ni = saving.samples_for_error_fpc(np.array([s2c, s2i]), Q * R, eps)
    truth = 1 - nc / ni
    hits = []
    for _ in range(200):
        r = saving.saving_predicted(*_coupled_pair(rng, Q, R), eps, rng=rng, n_resamples=400)
        hits.append(r["ci_low"] <= truth <= r["ci_high"])
    assert 0.89 <= np.mean(hits) <= 0.99, np.mean(hits)


def test_stats_records_give_back_the_stats_dicts():
    """The typed records of the analyses (engine.analysis.stats_records) hold exactly the stats
    dicts: to_dict() is the dict itself, key order included, optional keys absent as before."""
    from engine.analysis import stats_records as SR
    from engine.stats import multigen as mg

    rng = np.random.default_rng(5)
    A = (rng.random((30, 4)) < 0.6).astype(float)
    B = np.clip(A + (rng.random((30, 4)) < 0.2), 0, 1) * (rng.random((30, 4)) < 0.9)
    Ai, Bi = (rng.random((30, 4)) < 0.6).astype(float), (rng.random((30, 4)) < 0.55).astype(float)
    cases = [
        (SR.PairedDiff, pdiff.paired_diff_ci(A, B, rng=np.random.default_rng(1), n_resamples=200)),
        (SR.PairedDiff, pdiff.paired_diff_ci(A, B)),  # no bootstrap: None
        (SR.McNemar, pdiff.mcnemar_majority(A, B)),
        (SR.ScoreVariance, mg.score_variance(A)),
        (SR.VarianceSaving, saving.variance_saving(A - B, Ai - Bi)),
        (
            SR.PredictedSaving,
            saving.saving_predicted(A - B, Ai - Bi, 0.05, rng=np.random.default_rng(2), n_resamples=200),
        ),
        (
            SR.PredictedSaving,
            saving.saving_predicted(A - B, Ai - Bi, 0.05),
        ),  # no interval: no ci_method key
        (SR.VarianceComponents, pdiff.variance_components_diff(A, B)),
        (SR.VarianceComponents, bm.independent_components(A, B)),
        (SR.KdeCurve, bm.kde_curve(A.mean(axis=1), n_grid=20)),
        (SR.KdeCurve, bm.kde_curve(A.var(axis=1, ddof=1), n_grid=20, lower=0.0)),
    ]
    for cls, d in cases:
        assert json.dumps(cls.of(d).to_dict()) == json.dumps(d), (
            cls
        )  # same keys, order and values (NaN too)
    assert "ci_method" in cases[5][1] and "ci_method" not in SR.PredictedSaving.of(cases[6][1]).to_dict()
    assert SR.PairedDiff.of(cases[0][1]).to_dict()["bootstrap"] == cases[0][1]["bootstrap"]
    assert SR.PairedDiff.of(cases[0][1]).bootstrap.n_resamples == 200
    with pytest.raises(ValueError, match="unexpected keys \\['extra'\\]"):
        SR.McNemar.of({**cases[2][1], "extra": 1})
