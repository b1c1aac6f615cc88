"""engine.stats.clustered: prompt-clustered win-rates, BT/Davidson, Elo, paired mode test, position bias, Holm.

Four shapes: exact tiny cases; vectorised vs naive loops; seeded simulations of the guarantees in
the clustered judge design (engine.stats.simulate; small here, large in bench/clustered_coverage.py);
two implementations that must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import UserError
from engine.stats import clustered as CL
from engine.stats import simulate as S
from engine.stats import winrates as wr


def _tiny():
    # 3 prompts; prompt "p" has 3 rows, "q" 3, "r" 1; every model wins once (interior BT fit)
    a = np.array([0, 1, 0, 2, 1, 0, 2])
    b = np.array([1, 0, 2, 0, 2, 1, 1])
    o = np.array([0, 0, 2, 0, 1, 0, 0])
    c = np.array(["p", "p", "p", "q", "q", "q", "r"], dtype=object)
    return a, b, o, c


def test_cluster_codes_and_flag():
    codes, C, per_row = CL.cluster_codes(None, 4)
    assert per_row and C == 4 and codes.tolist() == [0, 1, 2, 3]
    codes, C, per_row = CL.cluster_codes(["x", "y", "x", None], 4)
    assert not per_row and C == 3 and codes[0] == codes[2] and len({codes[1], codes[3], codes[0]}) == 3
    with pytest.raises(UserError, match="shape"):
        CL.cluster_codes([1, 2], 3)


def test_point_estimates_equal_the_row_level_functions():
    a, b, o, c = _tiny()
    res = CL.winrate_cluster_bootstrap(a, b, o, 3, np.random.default_rng(0), cluster=c, n_resamples=50)
    W, T, n = wr.winrate_matrix(a, b, o, 3)
    np.testing.assert_allclose(res["W"], W)
    np.testing.assert_allclose(res["T"], T)
    np.testing.assert_array_equal(res["n"], n)
    assert res["n_clusters"] == 3 and res["per_row_clusters"] is False
    assert CL.winrate_cluster_bootstrap(a, b, o, 3, np.random.default_rng(0), n_resamples=5)[
        "per_row_clusters"
    ]
    beta, nu = CL.davidson_fit_counts(*wr.pairwise_counts(a, b, o, 3)[:2])
    beta0, nu0 = wr.davidson_fit(a, b, o, 3)
    np.testing.assert_allclose(beta, beta0, atol=1e-7)
    assert nu == pytest.approx(nu0, abs=1e-7)


def test_resampled_counts_equal_naive_row_resampling():
    rng = np.random.default_rng(1)
    d = S.JudgeDesign(n_prompts=12, n_repeats=2, modes=("coupled",))
    r = S.simulate_judge_design(d, rng)
    k = 4
    codes, C, _ = CL.cluster_codes(r["prompt"], r["a"].size)
    X = CL.cluster_pair_counts(r["a"], r["b"], r["outcome"], codes, C, k)
    mult = CL.cluster_multiplicities(C, 7, rng)
    wins, ties = CL.resampled_pair_counts(X, mult, k)
    for bb in range(7):
        rows = np.concatenate([np.repeat(np.flatnonzero(codes == cc), mult[bb, cc]) for cc in range(C)])
        w0, t0, _ = wr.pairwise_counts(r["a"][rows], r["b"][rows], r["outcome"][rows], k)
        np.testing.assert_array_equal(wins[bb], w0)
        np.testing.assert_array_equal(ties[bb], t0)
    assert np.all(mult.sum(axis=1) == C)


def test_batched_davidson_equals_one_at_a_time():
    rng = np.random.default_rng(2)
    wins = rng.integers(1, 30, size=(5, 4, 4)).astype(float)
    ties = rng.integers(0, 10, size=(5, 4, 4)).astype(float)
    ties = np.triu(ties, 1) + np.triu(ties, 1).transpose(0, 2, 1)
    for i in range(5):
        wins[i][np.diag_indices(4)] = 0
    beta, nu = CL.davidson_fit_counts(wins, ties, tol=1e-12)
    for i in range(5):
        # rows reconstructing the counts, fitted by the row-level reference implementation
        aa, bb, oo = [], [], []
        for x in range(4):
            for y in range(4):
                if x != y:
                    aa += [x] * int(wins[i, x, y])
                    bb += [y] * int(wins[i, x, y])
                    oo += [wr.A_WINS] * int(wins[i, x, y])
                if x < y:
                    aa += [x] * int(ties[i, x, y])
                    bb += [y] * int(ties[i, x, y])
                    oo += [wr.TIE] * int(ties[i, x, y])
        b0, n0 = wr.davidson_fit(np.array(aa), np.array(bb), np.array(oo), 4, tol=1e-12)
        np.testing.assert_allclose(beta[i], b0, atol=1e-8)
        assert nu[i] == pytest.approx(n0, abs=1e-8)


def test_weighted_elo_equals_elo_on_the_expanded_sequence():
    rng = np.random.default_rng(3)
    n, k = 60, 4
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    o = rng.integers(0, 3, n)
    weights = rng.integers(0, 4, size=(6, n))
    got = CL.elo_ratings_weighted(a, b, o, k, weights, K=8.0)
    for i in range(6):
        rows = np.repeat(np.arange(n), weights[i])  # each row repeated in place
        np.testing.assert_allclose(
            got[i], wr.elo_ratings(a[rows], b[rows], o[rows], k, K=8.0), rtol=0, atol=1e-9
        )
    with pytest.raises(UserError, match="integers"):
        CL.elo_ratings_weighted(a, b, o, k, weights + 0.5)


def test_sandwich_se_equals_naive_loop_and_bootstrap():
    rng = np.random.default_rng(4)
    r = S.simulate_judge_design(S.JudgeDesign(n_prompts=60, n_repeats=3, modes=("coupled",)), rng)
    a, b, o, p = r["a"], r["b"], r["outcome"], r["prompt"]
    res = CL.winrate_cluster_se(a, b, o, 4, cluster=p)
    for i, j in [(0, 1), (2, 3), (3, 0)]:
        rows = ((a == i) & (b == j)) | ((a == j) & (b == i))
        y = np.where(a[rows] == i, o[rows] == wr.A_WINS, o[rows] == wr.B_WINS).astype(float)
        ph = y.mean()
        sums = {}
        for cc, yy in zip(p[rows], y):
            sums[cc] = sums.get(cc, 0.0) + (yy - ph)
        C = len(sums)
        se = np.sqrt(sum(v * v for v in sums.values()) * C / (C - 1)) / y.size
        assert res["W"][i, j] == pytest.approx(ph)
        assert res["se"][i, j] == pytest.approx(se, rel=1e-10)
    boot = CL.winrate_cluster_bootstrap(
        a, b, o, 4, np.random.default_rng(5), cluster=p, n_resamples=1000
    )
    off = ~np.eye(4, dtype=bool)
    ratio = boot["W_draws"][:, off].std(axis=0, ddof=1) / res["se"][off]
    assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio


def test_cluster_intervals_cover_in_the_clustered_judge_design():
    # 100 data sets, few resamples: coverage of W_01, avg_0, beta_0 - beta_3 and every pair's W must be near
    # 0.95 (bound 0.88 = 0.95 - 2.5 MC SE); the row-level Wilson interval falls short in the same runs.
    d = S.JudgeDesign(n_prompts=60, n_repeats=4, modes=("coupled",))
    truth = S.judge_design_truth(d, "coupled")
    Wt = truth["W"]
    Tt = truth["T"]
    bt_true, _ = CL.davidson_fit_counts(np.nan_to_num(Wt) * 1000, np.nan_to_num(Tt) * 1000)
    rng = np.random.default_rng(2024)
    cov_w, cov_avg, cov_bt, cov_wilson = [], [], [], []
    for _ in range(100):
        r = S.simulate_judge_design(d, rng)
        a, b, o, p = r["a"], r["b"], r["outcome"], r["prompt"]
        res = CL.winrate_cluster_bootstrap(a, b, o, 4, rng, cluster=p, n_resamples=200)
        cov_w.append(res["W_low"][0, 1] <= Wt[0, 1] <= res["W_high"][0, 1])
        cov_avg.append(res["avg_low"][0] <= truth["avg"][0] <= res["avg_high"][0])
        bt = CL.davidson_cluster_bootstrap(a, b, o, 4, rng, cluster=p, n_resamples=200)
        contrast = bt["draws"][:, 0] - bt["draws"][:, 3]
        lo, hi = np.quantile(contrast, [0.025, 0.975])
        cov_bt.append(lo <= bt_true[0] - bt_true[3] <= hi)
        wins, _, n = wr.pairwise_counts(a, b, o, 4)
        wl, wh = wr.wilson_interval(wins[0, 1], n[0, 1])
        cov_wilson.append(wl <= Wt[0, 1] <= wh)
    assert np.mean(cov_w) >= 0.88 and np.mean(cov_avg) >= 0.88 and np.mean(cov_bt) >= 0.88, (
        np.mean(cov_w),
        np.mean(cov_avg),
        np.mean(cov_bt),
    )
    assert np.mean(cov_wilson) < np.mean(cov_w)


def test_elo_cluster_interval_covers_its_fixed_point():
    d = S.JudgeDesign(n_prompts=40, n_repeats=2, modes=("coupled",))
    truth = S.judge_design_truth(d, "coupled")
    fp = CL.elo_fixed_point(truth["W"], truth["T"], np.ones((4, 4)))
    rng = np.random.default_rng(77)
    cover = []
    for _ in range(60):
        r = S.simulate_judge_design(d, rng)
        res = CL.elo_cluster_bootstrap(
            r["a"], r["b"], r["outcome"], 4, rng, cluster=r["prompt"], n_resamples=150
        )
        cover.append(res["low"][0] <= fp[0] <= res["high"][0])
    assert np.mean(cover) >= 0.85, np.mean(cover)  # 60 reps: MC SE 0.028 at 0.95


def test_elo_fixed_point_is_the_zero_of_the_expected_update():
    W = np.array([[np.nan, 0.6, 0.7], [0.3, np.nan, 0.55], [0.2, 0.35, np.nan]])
    T = np.where(np.eye(3, dtype=bool), np.nan, 1 - W - W.T)
    n = np.ones((3, 3))
    r = CL.elo_fixed_point(W, T, n)
    E = 1 / (1 + 10 ** ((r[None, :] - r[:, None]) / 400))
    S_ = np.nan_to_num(W) + np.nan_to_num(T) / 2
    g = ((S_ - E) * ~np.eye(3, dtype=bool)).sum(axis=1)
    np.testing.assert_allclose(g, 0, atol=1e-9)
    assert r.mean() == pytest.approx(1000)


def test_paired_mode_test_exact_tiny():
    # one pair, 3 prompts, each with 2 coupled and 2 independent rows
    a = np.zeros(12, int)
    b = np.ones(12, int)
    mode = np.tile([0, 0, 1, 1], 3)
    p = np.repeat([0, 1, 2], 4)
    o = np.array([0, 0, 1, 1, 0, 1, 1, 1, 0, 2, 0, 1])
    res = CL.mode_diff_paired_test(a, b, o, mode, p, 2)
    d = np.array([1 - 0, 0.5 - 0, 0.5 - 0.5])
    assert res["diff"][0, 1] == pytest.approx(d.mean())
    assert res["se"][0, 1] == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    from scipy import stats

    assert res["p_value"][0, 1] == pytest.approx(stats.ttest_1samp(d, 0).pvalue)
    assert res["n_prompts"][0, 1] == 3
    with pytest.raises(UserError, match="prompt ids"):
        CL.mode_diff_paired_test(a, b, o, mode, None, 2)


def test_paired_mode_test_holds_size_under_a_true_null():
    # coupling = 0: both modes have the same distribution, but share the prompts (correlated)
    d = S.JudgeDesign(n_prompts=50, n_repeats=3, coupling=0.0)
    rng = np.random.default_rng(5)
    rej, rej_z = [], []
    for _ in range(200):
        r = S.simulate_judge_design(d, rng)
        res = CL.mode_diff_paired_test(r["a"], r["b"], r["outcome"], r["mode"], r["prompt"], 4)
        rej.append(res["p_value"][0, 1] < 0.05)
        W = [
            wr.pairwise_counts(
                r["a"][r["mode"] == m], r["b"][r["mode"] == m], r["outcome"][r["mode"] == m], 4
            )
            for m in (0, 1)
        ]
        _, pz = wr.two_proportion_ztest(W[0][0][0, 1], W[0][2][0, 1], W[1][0][0, 1], W[1][2][0, 1])
        rej_z.append(pz < 0.05)
    # 200 reps: MC SE 0.015 at 0.05; the bound is 3 SE above nominal
    assert np.mean(rej) <= 0.095, np.mean(rej)
    assert np.mean(rej_z) > np.mean(rej)  # the unpaired z test over-rejects in the same runs


def test_position_bias_exact_and_simulated():
    # unit 0: same verdict both orders; unit 1: first-shown wins both times (a flip)
    a = np.array([0, 1, 0, 1])
    b = np.array([1, 0, 1, 0])
    o = np.array([0, 1, 0, 0])
    u = np.array([0, 0, 1, 1])
    res = CL.position_bias(a, b, o, u)
    assert res["flip_rate"] == 0.5 and res["n_judgements"] == 2
    assert res["first_win_share"] == pytest.approx(3 / 4)
    rng = np.random.default_rng(6)
    r = S.simulate_judge_design(S.JudgeDesign(n_prompts=30, n_repeats=2), rng)
    res = CL.position_bias(r["a"], r["b"], r["outcome"], r["unit"], r["prompt"])
    assert res["consistency"] == pytest.approx(r["consistency"])
    assert res["first_win_low"] > 0.5  # the design's judge favours the first position
    with pytest.raises(UserError, match="swapped"):
        CL.position_bias(a, a, o, u)


def test_holm_exact_and_fwer():
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, 1*0.04 -> 0.02, 0.03, 0.06, 0.06 (monotone)
    np.testing.assert_allclose(CL.holm_adjust(p), [0.03, 0.06, 0.06, 0.02, np.nan])
    rng = np.random.default_rng(7)
    pv = rng.random((4000, 6))  # all nulls true
    fwer = np.mean([np.any(CL.holm_adjust(x) <= 0.05) for x in pv])
    assert fwer <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 4000)
