"""Small-sample calibration (docs/REPRODUCTION.md) of max-t rank-sets (wild cluster bootstrap-t),
Westfall-Young max-T over pairs, Elo as the Elo-scale MLE, the headline saving and its studentised
interval, intervals that respect [0, 1] and do not collapse, typed warnings, prompt-level draws.

Shapes: two implementations that agree (vectorised vs naive loop), exact tiny cases, and seeded
simulations whose tolerance is 3 Monte Carlo standard errors (the large runs: bench/ and
docs/REPRODUCTION.md, "Statistical choices beyond docs/METHODS.md").
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from engine.analysis.notices import AnalysisWarning, Notice, small_sample_warning
from engine.analysis.ranksets import prompt_draws
from engine.stats import clustered as CL
from engine.stats import paired_tests as PT
from engine.stats import ranking as R
from engine.stats import saving as SV
from engine.stats import simulate as S
from engine.stats import winrates as WR
from engine.stats.paired_difference import paired_diff_ci


def _mc_tol(p: float, reps: int) -> float:
    return 3 * np.sqrt(p * (1 - p) / reps)


# ----------------------------------------------------------------------------- wild bootstrap-t


def _naive_wild(first, second, w, w2, k, cluster, v):
    """Re-estimate theta and the clustered Sigma on Y*_c = theta N_c + v_c u_c with explicit loops."""
    C = int(cluster.max()) + 1
    Y = np.zeros((C, k))
    N = np.zeros((C, k))
    for f, s, a, b, c in zip(first, second, w, w2, cluster):
        Y[c, f] += a
        Y[c, s] += b
        N[c, f] += 1
        N[c, s] += 1
    th = Y.sum(0) / N.sum(0)
    u = Y - th * N
    out = np.zeros((v.shape[0], k, k))
    for d in range(v.shape[0]):
        Ys = th * N + v[d][:, None] * u
        ts = Ys.sum(0) / N.sum(0)
        us = Ys - ts * N
        sig = (us.T @ us) / np.outer(N.sum(0), N.sum(0))
        for i in range(k):
            for j in range(k):
                sij = np.sqrt(max(sig[i, i] + sig[j, j] - 2 * sig[i, j], 0.0))
                out[d, i, j] = ((ts[i] - ts[j]) - (th[i] - th[j])) / sij if sij > 0 else 0.0
    return out


def test_wild_draws_match_a_naive_reestimation_loop():
    d = S.JudgeDesign(n_prompts=12, n_repeats=2, quality=(0.2, 0.0, -0.1), modes=("coupled",))
    r = S.simulate_judge_design(d, np.random.default_rng(0), shuffle=False)
    w, w2 = (r["outcome"] == 0).astype(float), (r["outcome"] == 1).astype(float)
    got = R.wild_draws_onesource(
        r["a"], r["b"], w, w2, 3, r["prompt"], np.random.default_rng(5), n_draws=40
    )
    v = np.random.default_rng(5).integers(0, 2, size=(40, 12)) * 2.0 - 1.0  # the same Rademacher draws
    codes = CL.cluster_codes(r["prompt"], r["a"].size)[0]  # the prompt order the engine uses
    np.testing.assert_allclose(got, _naive_wild(r["a"], r["b"], w, w2, 3, codes, v), atol=1e-10)


def test_two_source_wild_draws_match_a_naive_reestimation_loop():
    """PPR's form (theta = lam a - b, prompts matched across the two sources, one weight each): each
    draw re-weights both sources' residual sums, re-estimates each e*_s and the clustered Sigma* of
    theta* = sum_s lam_s e*_s, with loops over draws and pairs."""
    from engine.stats.maxt import wild_maxt_draws

    rng, C, k, D = np.random.default_rng(11), 15, 4, 30
    sources = []
    for lam in (0.7, -1.0):
        N = rng.integers(0, 3, size=(C, k)).astype(float)
        N[0] += 1  # every model has a comparison in every source
        sources.append((lam, rng.random((C, k)) * N, N))
    got = wild_maxt_draws(sources, np.random.default_rng(3), n_draws=D)
    v = np.random.default_rng(3).integers(0, 2, size=(D, C)) * 2.0 - 1.0  # the same Rademacher draws
    theta = sum(lam * Y.sum(0) / N.sum(0) for lam, Y, N in sources)
    want = np.zeros((D, k, k))
    for d in range(D):
        ts, U = np.zeros(k), np.zeros((C, k))
        for lam, Y, N in sources:
            c, e = N.sum(0), Y.sum(0) / N.sum(0)
            Ys = e * N + v[d][:, None] * (Y - e * N)
            es = Ys.sum(0) / c
            ts += lam * es
            U += lam * (Ys - es * N) / c
        sig = U.T @ U
        for i in range(k):
            for j in range(k):
                sij = np.sqrt(max(sig[i, i] + sig[j, j] - 2 * sig[i, j], 0.0))
                want[d, i, j] = ((ts[i] - ts[j]) - (theta[i] - theta[j])) / sij if sij > 0 else 0.0
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_maxt_with_wild_calibration_covers_at_40_prompts():
    """Least-favourable design (5 tied models), 40 prompts: the wild bootstrap-t covers 1 - alpha within
    3 MC SE, and never less often than the normal calibration on the same data (which under-covers:
    0.92 at nominal 0.95 with 60 prompts, docs/REPRODUCTION.md)."""
    k, reps, alpha = 5, 300, 0.1
    d = S.JudgeDesign(n_prompts=40, n_repeats=2, quality=(0.0,) * k, modes=("coupled",))
    rng = np.random.default_rng(2026)
    tl, tu = R.true_ranksets(np.zeros(k))
    cov = {"wild": [], "normal": []}
    for _ in range(reps):
        r = S.simulate_judge_design(d, rng, shuffle=False)
        w, w2 = (r["outcome"] == 0).astype(float), (r["outcome"] == 1).astype(float)
        th, sg = R.onesource_theta_sigma(r["a"], r["b"], w, w2, k, cluster=r["prompt"])
        nd = R.wild_draws_onesource(r["a"], r["b"], w, w2, k, r["prompt"], rng, n_draws=1000)
        for cal, null in (("wild", nd), ("normal", None)):
            rs = R.ranksets_maxt(th, sg, alpha, rng=rng, n_draws=1000, null_draws=null, stepdown=False)
            cov[cal].append(bool(R.rankset_covers(rs["lower"], rs["upper"], tl, tu)))
    wild, normal = np.mean(cov["wild"]), np.mean(cov["normal"])
    assert abs(wild - (1 - alpha)) <= _mc_tol(1 - alpha, reps), (wild, normal)  # ±0.052 at 300 reps
    assert wild >= normal, (wild, normal)


def test_wild_draws_of_column_means_match_a_naive_loop():
    """maxt.wild_draws_means: each draw re-weights the questions (M*_c = theta + v_c (M_c - theta)),
    re-estimates theta* and Cov(M*)/C with ddof 1, as the observed statistic is computed."""
    from engine.stats.maxt import wild_draws_means

    M = np.random.default_rng(4).integers(0, 3, size=(9, 3)) / 2.0  # (C, k) question means of 2 repeats
    got = wild_draws_means(M, np.random.default_rng(8), n_draws=25)
    v = np.random.default_rng(8).integers(0, 2, size=(25, 9)) * 2.0 - 1.0  # the same Rademacher weights
    th, C = M.mean(0), M.shape[0]
    want = np.zeros((25, 3, 3))
    for d in range(25):
        Ms = th + v[d][:, None] * (M - th)
        ts, sig = Ms.mean(0), np.cov(Ms, rowvar=False, ddof=1) / C
        for i in range(3):
            for j in range(3):
                sij = np.sqrt(max(sig[i, i] + sig[j, j] - 2 * sig[i, j], 0.0))
                want[d, i, j] = ((ts[i] - ts[j]) - (th[i] - th[j])) / sij if sij > 0 else 0.0
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_accuracy_ranks_with_wild_calibration_cover_at_40_questions():
    """Least-favourable design for accuracy-ranks (4 tied models, 40 questions x 2 coupled repeats):
    the wild bootstrap-t (the default) covers 1 - alpha within 3 MC SE and never less often than the
    normal calibration on the same data (0.872 at nominal 0.90 over 1,500 data sets: bench/
    accuracy_ranks_coverage.py, docs/REPRODUCTION.md)."""
    from scipy import stats

    from engine.analysis.accuracy_ranks import rank_accuracies

    k, Q, reps, alpha = 4, 40, 300, 0.1
    rng = np.random.default_rng(2027)
    tl, tu = R.true_ranksets(np.zeros(k))
    cov = {"wild": [], "normal": []}
    for _ in range(reps):
        p = stats.norm.cdf(rng.normal(0, 1, (Q, 1)) + rng.normal(0, 0.5, (Q, k)))  # (Q, k) tied models
        M = (rng.random((Q, 2, 1)) < p[:, None, :]).mean(axis=1)  # (Q, k): one U per (question, repeat)
        for cal in cov:
            _, _, rs = rank_accuracies(M, alpha, rng, n_draws=1000, calibration=cal)
            assert rs["calibration"] == cal
            cov[cal].append(bool(R.rankset_covers(rs["lower"], rs["upper"], tl, tu)))
    wild, normal = np.mean(cov["wild"]), np.mean(cov["normal"])
    assert abs(wild - (1 - alpha)) <= _mc_tol(1 - alpha, reps), (wild, normal)  # ±0.052 at 300 reps
    assert wild >= normal, (wild, normal)


def test_ranksets_for_reports_the_wild_calibration_on_few_prompts():
    import pandas as pd

    from engine.analysis.ranksets import ranksets_for

    d = S.JudgeDesign(n_prompts=20, n_repeats=1, quality=(0.3, 0.0, -0.3), modes=("coupled",))
    r = S.simulate_judge_design(d, np.random.default_rng(1))
    names = np.array(["m0", "m1", "m2"])
    win = np.where(r["outcome"] == 0, "a", np.where(r["outcome"] == 1, "b", "tie"))
    df = pd.DataFrame(
        {
            "prompt_id": [f"p{x}" for x in r["prompt"]],
            "model_a": names[r["a"]],
            "model_b": names[r["b"]],
            "human_winner": win,
            "judge_winner": None,
        }
    )
    res = ranksets_for(df, "human", 0.1, n_draws=2000)
    assert res.calibration == "wild" and any(w.kind is Notice.SMALL_SAMPLE for w in res.warnings)
    assert res.to_dict()["calibration"] == "wild" and "lam" not in res.to_dict()
    paper = ranksets_for(df, "human", 0.1, covariance="paper", n_draws=2000)
    assert paper.calibration == "normal" and "clustered by prompt" not in paper.clustering
    assert paper.per_row_clusters and paper.n_clusters == len(df)


# ----------------------------------------------------------------------------- Westfall-Young


def _naive_maxt_adjust(d, mult):
    C, H = d.shape

    def tstat(wts, centre):
        out = []
        for h in range(H):
            x, ww = d[:, h], wts
            ok = ~np.isnan(x)
            n = ww[ok].sum()
            m = (ww[ok] * x[ok]).sum() / n
            var = ((ww[ok] * x[ok] ** 2).sum() - n * m * m) / (n - 1)
            se = np.sqrt(max(var, 0) / n)
            out.append((m - centre[h]) / se if se > 0 else 0.0)
        return np.array(out)

    t = np.abs(tstat(np.ones(C), np.zeros(H)))
    centre = np.nanmean(d, axis=0)
    tb = np.array([np.abs(tstat(m, centre)) for m in mult])
    order = np.argsort(-t, kind="stable")
    p, run = np.empty(H), 0.0
    for r, h in enumerate(order):
        run = max(run, np.mean(tb[:, order[r:]].max(axis=1) >= t[h]))
        p[h] = run
    return p


def test_maxt_adjust_matches_a_naive_loop():
    rng = np.random.default_rng(3)
    C = 15
    common = rng.normal(size=(C, 1))
    d = (
        0.6 * common + rng.normal(size=(C, 4)) + np.array([0.9, 0.7, 0.0, 0.2])
    )  # positively dependent cells
    d[2, 3] = np.nan
    got = PT.maxt_adjust(d, np.random.default_rng(9), n_resamples=300)
    mult = CL.cluster_multiplicities(C, 300, np.random.default_rng(9)).astype(float)
    np.testing.assert_allclose(got, _naive_maxt_adjust(d, mult), atol=1e-12)


def test_westfall_young_keeps_the_family_wise_error_and_beats_holm():
    """Null (no coupling): FWER of the max-T stars <= 0.05 + 3 MC SE; with a real shift, the max-T
    procedure rejects at least as many cells as Holm in total (positively dependent cells)."""
    k, reps = 4, 150
    rng = np.random.default_rng(11)
    off = ~np.eye(k, dtype=bool)
    null = S.JudgeDesign(n_prompts=30, n_repeats=2, coupling=0.0)
    fwer = []
    for _ in range(reps):
        r = S.simulate_judge_design(null, rng)
        t = PT.mode_diff_paired_test(
            r["a"], r["b"], r["outcome"], r["mode"], r["prompt"], k, rng=rng, n_resamples=300
        )
        fwer.append(bool(np.any(np.nan_to_num(t["p_maxt"][off], nan=1) < 0.05)))
    assert np.mean(fwer) <= 0.05 + _mc_tol(0.05, reps), np.mean(fwer)
    alt = S.JudgeDesign(
        n_prompts=40, n_repeats=3, coupling=0.9, gen_sd=1.0, quality=(0.6, 0.2, 0.0, -0.4)
    )
    n_maxt = n_holm = 0
    for _ in range(40):
        r = S.simulate_judge_design(alt, rng)
        t = PT.mode_diff_paired_test(
            r["a"], r["b"], r["outcome"], r["mode"], r["prompt"], k, rng=rng, n_resamples=300
        )
        n_maxt += int(np.sum(np.nan_to_num(t["p_maxt"][off], nan=1) < 0.05))
        n_holm += int(np.sum(np.nan_to_num(t["p_holm"][off], nan=1) < 0.05))
    assert n_maxt >= n_holm > 0, (n_maxt, n_holm)


# ----------------------------------------------------------------------------- Elo


def test_elo_fit_counts_is_the_fixed_point_batched_and_single():
    r = S.simulate_judge_design(
        S.JudgeDesign(n_prompts=25, n_repeats=1, modes=("coupled",)), np.random.default_rng(4)
    )
    codes, C, _ = CL.cluster_codes(r["prompt"], r["a"].size)
    X = CL.cluster_pair_counts(r["a"], r["b"], r["outcome"], codes, C, 4)
    wins, ties = CL.resampled_pair_counts(
        X, CL.cluster_multiplicities(C, 3, np.random.default_rng(0)), 4
    )  # 3 resamples
    got = CL.elo_fit_counts(wins, ties)
    for b in range(3):
        n = wins[b] + wins[b].T + ties[b]
        with np.errstate(invalid="ignore", divide="ignore"):
            W, T = wins[b] / n, ties[b] / n
        np.testing.assert_allclose(
            got[b], CL.elo_fixed_point(W, T, n), atol=1e-2
        )  # the 1e-4-comparison ridge
        np.testing.assert_allclose(CL.elo_fit_counts(wins[b], ties[b]), got[b], atol=1e-9)


def test_elo_interval_is_for_the_mle_and_reports_the_online_rating():
    d = S.JudgeDesign(n_prompts=30, n_repeats=2, modes=("coupled",))
    r = S.simulate_judge_design(d, np.random.default_rng(6))
    res = CL.elo_cluster_bootstrap(
        r["a"], r["b"], r["outcome"], 4, np.random.default_rng(1), cluster=r["prompt"], n_resamples=200
    )
    W, T, n = WR.winrate_matrix(r["a"], r["b"], r["outcome"], 4)
    np.testing.assert_allclose(res["elo"], CL.elo_fixed_point(W, T, n), atol=1e-2)
    np.testing.assert_allclose(res["online"], WR.elo_ratings(r["a"], r["b"], r["outcome"], 4), atol=1e-9)
    assert np.all(res["low"] <= res["elo"]) and np.all(res["elo"] <= res["high"])


# ----------------------------------------------------------------------------- the saving


def test_headline_saving_is_one_minus_the_se_ratio_of_the_paired_difference():
    rng = np.random.default_rng(8)
    Ac, Bc = S.simulate_benchmark(S.BenchmarkDesign(n_questions=30, coupled=True), rng)
    Ai, Bi = S.simulate_benchmark(S.BenchmarkDesign(n_questions=30, coupled=False), rng)
    vs = SV.variance_saving(Ac - Bc, Ai - Bi)
    se_c, se_i = paired_diff_ci(Ac, Bc)["se"], paired_diff_ci(Ai, Bi)["se"]
    assert vs["saving"] == pytest.approx(1 - se_c**2 / se_i**2)
    assert vs["questions_factor"] == pytest.approx(se_i**2 / se_c**2)
    assert vs["ci_low"] < vs["saving"] < vs["ci_high"]


def test_saving_intervals_cover_at_40_questions():
    """Studentised (jackknife SE on the log scale, t_{Q-1}) intervals of both savings at Q = 40:
    within 3 MC SE of 0.95 (the percentile bootstrap covered 0.887 here)."""
    base = S.BenchmarkDesign(n_questions=40, n_repeats=5, a=(0.3, 0.0))
    rng = np.random.default_rng(21)
    big = [
        S.simulate_benchmark(
            S.BenchmarkDesign(n_questions=100_000, n_repeats=5, a=(0.3, 0.0), coupled=c), rng
        )
        for c in (True, False)
    ]
    Dc, Di = (A - B for A, B in big)
    truth_v = 1 - Dc.mean(1).var() / Di.mean(1).var()
    eps, N = 0.05, 200
    truth_p = 1 - SV.samples_for_error_fpc(Dc.var(), N, eps) / SV.samples_for_error_fpc(Di.var(), N, eps)
    reps, cv, cp = 300, [], []
    for _ in range(reps):
        (Ac, Bc), (Ai, Bi) = (
            S.simulate_benchmark(
                S.BenchmarkDesign(n_questions=40, n_repeats=5, a=base.a, coupled=c), rng
            )
            for c in (True, False)
        )
        v = SV.variance_saving(Ac - Bc, Ai - Bi)
        p = SV.saving_predicted(Ac - Bc, Ai - Bi, eps, rng=rng, n_resamples=50)
        cv.append(v["ci_low"] <= truth_v <= v["ci_high"])
        cp.append(p["ci_low"] <= truth_p <= p["ci_high"])
    for c in (cv, cp):
        assert abs(np.mean(c) - 0.95) <= _mc_tol(0.95, reps), (np.mean(cv), np.mean(cp))


# ----------------------------------------------------------------------------- ranges, degenerate, warnings


def test_zero_of_twelve_win_rate_does_not_collapse():
    a, b, o = np.zeros(12, int), np.ones(12, int), np.ones(12, int)  # y beats x on 12 prompts
    r = CL.winrate_cluster_bootstrap(
        a, b, o, 2, np.random.default_rng(0), cluster=np.arange(12), n_resamples=200
    )
    lo, hi = WR.wilson_interval(0, 12)
    assert (
        r["W"][0, 1] == 0 and r["W_low"][0, 1] == 0.0 and r["W_high"][0, 1] == pytest.approx(float(hi))
    )
    assert r["W_fallback"][0, 1] and r["W_high"][0, 1] > 0.2
    # 12 rows from 3 prompts: one observation per prompt, a wider interval
    r3 = CL.winrate_cluster_bootstrap(
        a, b, o, 2, np.random.default_rng(0), cluster=np.arange(12) % 3, n_resamples=200
    )
    assert r3["W_high"][0, 1] == pytest.approx(float(WR.wilson_interval(0, 3)[1]))
    se = CL.winrate_cluster_se(a, b, o, 2, cluster=np.arange(12))
    assert se["low"][0, 1] == 0.0 and se["high"][0, 1] > 0.2


def test_position_bias_interval_stays_in_the_unit_interval():
    # 6 judgements in both orders, the first-shown output wins 10 of 12 decisive verdicts
    a = np.array([0, 1] * 6)
    b = 1 - a
    o = np.array([0, 0] * 5 + [1, 1])
    res = CL.position_bias(a, b, o, unit=np.repeat(np.arange(6), 2), cluster=np.repeat(np.arange(6), 2))
    assert 0.0 <= res["first_win_low"] <= res["first_win_share"] <= res["first_win_high"] <= 1.0
    allfirst = CL.position_bias(a, b, np.zeros(12, int), unit=np.repeat(np.arange(6), 2))
    assert (
        allfirst["first_win_high"] == 1.0 and allfirst["first_win_low"] < 1.0
    )  # degenerate: no collapse


def test_typed_warnings_survive_json_and_pickle():
    w = small_sample_warning(12)
    assert w is not None and w.kind is Notice.SMALL_SAMPLE and small_sample_warning(30) is None
    back = pickle.loads(pickle.dumps([w, AnalysisWarning(Notice.JUDGE_ONLY, "x")]))
    assert [x.kind for x in back] == [Notice.SMALL_SAMPLE, Notice.JUDGE_ONLY]
    assert json.loads(json.dumps(back)) == [str(w), "x"]


def test_prompt_draws_keep_a_prompts_rows_together():
    codes = np.repeat(np.arange(10), [3, 1, 2, 4, 2, 2, 3, 1, 1, 1])
    for idx, lab in prompt_draws(codes, total=12, labelled=4, reps=20, rng=np.random.default_rng(0)):
        drawn = np.unique(codes[idx])
        assert sorted(idx.tolist()) == sorted(np.flatnonzero(np.isin(codes, drawn)).tolist())
        assert len(idx) >= 12 and lab.sum() >= 4 and (~lab).sum() > 0
        assert not set(codes[idx][lab]) & set(
            codes[idx][~lab]
        )  # a prompt is labelled whole or not at all
