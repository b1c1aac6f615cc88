"""PPR rank-sets (docs/METHODS.md section 4): exact tiny cases, naive loops, agreement, coverage simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.errors import UserError
from engine.stats import ranking as R

# 3 models, 5 comparisons (hand-computed below)
FIRST = np.array([0, 1, 2, 0, 1])
SECOND = np.array([1, 2, 0, 2, 0])
W = np.array([1, 0, 0, 1, 0.0])
W2 = np.array([0, 1, 0, 0, 1.0])


def test_onesource_exact_tiny_case():
    # c = (4, 3, 3); theta0 = (1+0+1+1)/4, theta1 = 0/3, theta2 = (1+0+0)/3
    theta, sig = R.onesource_theta_sigma(FIRST, SECOND, W, W2, 3, "delta")
    np.testing.assert_allclose(theta, [0.75, 0.0, 1 / 3])
    # A A^T = [[3/4, 0, 1/6], [0, 0, 0], [1/6, 0, 2/3]]
    AAT = np.array([[0.75, 0, 1 / 6], [0, 0, 0], [1 / 6, 0, 2 / 3]])
    np.testing.assert_allclose(sig, AAT / np.outer([4, 3, 3], [4, 3, 3]))
    np.testing.assert_allclose(sig[0, 0], 3 / 64)
    np.testing.assert_allclose(sig[2, 2], 2 / 27)
    np.testing.assert_allclose(sig[0, 2], 1 / 72)
    _, sig_p = R.onesource_theta_sigma(FIRST, SECOND, W, W2, 3, "paper")
    np.testing.assert_allclose(sig_p, AAT / 25)


def _naive_residuals(first, second, w, w2, theta, k):
    A = np.zeros((k, len(first)))
    for i in range(len(first)):
        for m in range(k):
            A[m, i] = (w[i] - theta[m]) * (first[i] == m) + (w2[i] - theta[m]) * (second[i] == m)
    return A


def test_residual_matrix_matches_naive_loop():
    rng = np.random.default_rng(0)
    k, n = 5, 60
    first = rng.integers(0, k, n)
    second = (first + rng.integers(1, k, n)) % k
    out = rng.integers(0, 3, n)
    w, w2 = (out == 0).astype(float), (out == 1).astype(float)
    theta = R.winrate_pointestimate(first, second, w, w2, k)
    np.testing.assert_allclose(
        R.winrate_residuals(first, second, w, w2, theta, k),
        _naive_residuals(first, second, w, w2, theta, k),
    )
    # the paper's matrix form of theta: (1 (c)^T o I)^-1 (M w + M' w')
    M = np.eye(k)[first].T
    M2 = np.eye(k)[second].T
    c = (M + M2) @ np.ones(n)
    np.testing.assert_allclose(
        theta, np.linalg.inv(np.outer(np.ones(k), c) * np.eye(k)) @ (M @ w + M2 @ w2)
    )


def _naive_ranksets(theta, sigma, alpha):
    """Algorithm 2 literally as printed in the paper (Eq. 10 distance)."""
    k = len(theta)
    q = stats.chi2.ppf(1 - alpha, k)
    lo, up = np.ones(k, int), np.full(k, k)
    for m in range(k):
        for j in range(k):
            if j == m:
                continue
            d = abs(theta[m] - theta[j]) / np.sqrt(2) - np.sqrt(
                0.5 * (sigma[m, m] + sigma[j, j] - 2 * sigma[m, j]) * q
            )
            if d > 0 and theta[m] < theta[j]:
                lo[m] += 1
            elif d > 0 and theta[m] > theta[j]:
                up[m] -= 1
    return lo, up


def test_ranksets_vectorised_matches_naive_loop_batched_and_multi_alpha():
    rng = np.random.default_rng(1)
    k, reps = 7, 40
    theta = rng.uniform(0, 1, (reps, k))
    X = rng.normal(size=(reps, k, 3 * k))
    sigma = X @ np.swapaxes(X, 1, 2) * rng.uniform(1e-4, 5e-3, (reps, 1, 1))
    alphas = np.array([0.4, 0.1, 0.01])
    lo, up = R.ranksets(theta, sigma, alphas)
    assert lo.shape == (3, reps, k)
    for ai, a in enumerate(alphas):
        for r in range(reps):
            nl, nu = _naive_ranksets(theta[r], sigma[r], a)
            np.testing.assert_array_equal(lo[ai, r], nl)
            np.testing.assert_array_equal(up[ai, r], nu)
    # scalar alpha, single estimate
    l1, u1 = R.ranksets(theta[0], sigma[0], 0.1)
    np.testing.assert_array_equal(l1, lo[1, 0])
    np.testing.assert_array_equal(u1, up[1, 0])


def test_ranksets_exact_separated_and_unseparated():
    theta = np.array([0.5, 0.3, 0.29])
    sigma = np.eye(3) * 1e-4
    lo, up = R.ranksets(theta, sigma, 0.05)
    # q = chi2_3(0.95) = 7.81; threshold sqrt(7.81 * 2e-4) = 0.0395: 0 vs others separated, 1 vs 2 not
    np.testing.assert_array_equal(lo, [1, 2, 2])
    np.testing.assert_array_equal(up, [1, 3, 3])


def test_ppr_lambda_zero_equals_human_only_and_perfect_judge():
    rng = np.random.default_rng(2)
    k = 4
    first, second = R.balanced_design(k, 30)
    theta, judge = R.synthetic_theta(k, 0.1, rng)
    w, wh = R.synthetic_outcomes(first, theta, judge, rng)
    z = np.zeros_like(w)
    lab = np.arange(len(first)) % 3 == 0
    args = (
        first[~lab],
        second[~lab],
        wh[~lab],
        z[~lab],
        first[lab],
        second[lab],
        w[lab],
        z[lab],
        wh[lab],
        z[lab],
        k,
    )
    for cov in R.COVARIANCES:
        t0, s0, lam = R.ppr_theta_sigma(*args, lam=0.0, covariance=cov)
        th, sh = R.onesource_theta_sigma(first[lab], second[lab], w[lab], z[lab], k, cov)
        assert lam == 0.0
        np.testing.assert_allclose(t0, th, atol=1e-15)
        np.testing.assert_allclose(s0, sh, atol=1e-15)
    # a judge identical to the humans with lambda = 1: theta = judge win-rates on D_N, B = 0
    args_same = (
        first[~lab],
        second[~lab],
        w[~lab],
        z[~lab],
        first[lab],
        second[lab],
        w[lab],
        z[lab],
        w[lab],
        z[lab],
        k,
    )
    t1, s1, _ = R.ppr_theta_sigma(*args_same, lam=1.0)
    tN, sN = R.onesource_theta_sigma(first[~lab], second[~lab], w[~lab], z[~lab], k)
    np.testing.assert_allclose(t1, tN, atol=1e-15)
    np.testing.assert_allclose(s1, sN, atol=1e-15)
    # perfect judge: the trace-optimal lambda is N/(n+N) * tr(Sigma_n)/tr(Sigma_N) * N/n ~ 1 -> clipped
    lam_auto = R.ppr_lambda(*args_same)
    assert 0.5 < lam_auto <= 1.0


def test_ppr_paper_covariance_is_the_published_formula_bit_for_bit():
    """--covariance paper = Eq. 5 and Eq. 7 evaluated with the published matrix arithmetic, exactly.

    The reference below is a literal matrix transcription of the paper's formulas (one-hot
    matrices, diag(c)^-1 as a diagonal matrix, theta = lambda a - b, Sigma = lambda^2 A A^T / N^2
    + B B^T / n^2, lambda of Algorithm 4); the library must give the same floats, not just close ones.
    """
    rng = np.random.default_rng(3)
    k = 4
    first, second = R.balanced_design(k, 20)
    theta, judge = R.synthetic_theta(k, 0.3, rng)
    w, wh = R.synthetic_outcomes(first, theta, judge, rng)
    ties = rng.random(len(w)) < 0.2  # make some second-model wins and ties too
    w2 = np.where(ties, 0.0, (rng.random(len(w)) < 0.3) * (1 - w))
    wh2 = np.where(ties, 0.0, (rng.random(len(w)) < 0.3) * (1 - wh))
    lab = np.arange(len(first)) % 4 == 0
    N, n = int((~lab).sum()), int(lab.sum())
    ones = lambda m: np.ones((m, 1))  # noqa: E731

    def mats(mask):
        # C-contiguous k x n one-hot matrices (BLAS sums a transposed view in another order)
        M1 = np.ascontiguousarray(np.eye(k)[first[mask]].T)
        M2 = np.ascontiguousarray(np.eye(k)[second[mask]].T)
        c = ((M1 + M2) @ ones(mask.sum())).ravel()
        Dinv = (ones(k) @ c[None, :]) * np.identity(k)
        for i in range(k):
            Dinv[i, i] = 1 / Dinv[i, i]
        return M1, M2, Dinv

    def resid(M1, M2, y1, y2, centre):
        return (ones(k) @ (y1 - M1.T @ centre)[None, :]) * M1 + (
            ones(k) @ (y2 - M2.T @ centre)[None, :]
        ) * M2

    MN1, MN2, DN = mats(~lab)
    Mn1, Mn2, Dn = mats(lab)
    # Algorithm 4
    ah = Dn @ (Mn1 @ wh[lab] + Mn2 @ wh2[lab])
    ahum = Dn @ (Mn1 @ w[lab] + Mn2 @ w2[lab])
    Ah, Ahum = resid(Mn1, Mn2, wh[lab], wh2[lab], ah), resid(Mn1, Mn2, w[lab], w2[lab], ahum)
    aN = DN @ (MN1 @ wh[~lab] + MN2 @ wh2[~lab])
    AN = resid(MN1, MN2, wh[~lab], wh2[~lab], aN)
    lam_ref = np.trace((Ahum @ Ah.T) / n) / ((1 + n / N) * np.trace((AN @ AN.T) / N**2 * N))
    lam_ref = min(max(lam_ref, 0), 1)
    # Algorithm 1 (Eq. 5, 7)
    a = aN
    y1, y2 = lam_ref * wh[lab] - w[lab], lam_ref * wh2[lab] - w2[lab]
    b = Dn @ (Mn1 @ y1 + Mn2 @ y2)
    A, B = AN, resid(Mn1, Mn2, y1, y2, b)
    theta_ref = lam_ref * a - b
    sigma_ref = (lam_ref**2) * (A @ A.T) / (N**2) + (B @ B.T) / (n**2)

    args = (
        first[~lab],
        second[~lab],
        wh[~lab],
        wh2[~lab],
        first[lab],
        second[lab],
        w[lab],
        w2[lab],
        wh[lab],
        wh2[lab],
        k,
    )
    t, s, lam = R.ppr_theta_sigma(*args, lam="auto", covariance="paper")
    assert 0 < lam < 1 and lam == lam_ref
    np.testing.assert_array_equal(t, theta_ref)
    np.testing.assert_array_equal(s, sigma_ref)
    # Algorithm 3 (one source): A A^T / n^2, exactly
    t1, s1 = R.onesource_theta_sigma(first[lab], second[lab], w[lab], w2[lab], k, "paper")
    np.testing.assert_array_equal(t1, ahum)
    np.testing.assert_array_equal(s1, (Ahum @ Ahum.T) / (n**2))
    # on this balanced design the delta covariance is k^2/4 times the paper's
    _, s_d, _ = R.ppr_theta_sigma(*args, lam=lam, covariance="delta")
    np.testing.assert_allclose(s_d, s * k**2 / 4, rtol=1e-12)


def test_delta_covariance_matches_monte_carlo_variance():
    """Two routes to Var(theta_hat): the delta formula (averaged) vs the spread over 1500 simulated datasets.

    Comparisons are drawn as the paper assumes (a uniformly random ordered pair each), so the
    design varies between datasets. (On a fixed, position-balanced design the delta formula is
    conservative: it also counts the first/second position effect as noise.)
    """
    rng = np.random.default_rng(4)
    k, n = 5, 200
    theta = np.array([0.1, 0.2, 0.25, 0.35, 0.45])
    ests, sigs, sigs_p = [], [], []
    for _ in range(1500):
        first = rng.integers(0, k, n)
        second = (first + rng.integers(1, k, n)) % k
        w, _ = R.synthetic_outcomes(first, theta, theta, rng)
        t, s = R.onesource_theta_sigma(first, second, w, np.zeros_like(w), k)
        ests.append(t)
        sigs.append(s)
        sigs_p.append(R.onesource_theta_sigma(first, second, w, np.zeros_like(w), k, "paper")[1])
    mc = np.cov(np.array(ests).T)
    est = np.mean(sigs, axis=0)
    # MC relative s.e. of a variance from 1500 draws ~ 3.7%: diagonal within 12%
    np.testing.assert_allclose(np.diag(est), np.diag(mc), rtol=0.12)
    np.testing.assert_allclose(est, mc, atol=0.12 * np.diag(mc).max())
    ratio_paper = np.diag(mc) / np.diag(np.mean(sigs_p, axis=0))
    assert np.all(ratio_paper > 0.8 * k**2 / 4)  # the paper's Sigma is ~k^2/4 = 6.25x too small


def _coverage(rng, reps, k, per_pair, n_per_pair, u, alpha):
    first, second = R.balanced_design(k, per_pair)
    blk = np.arange(len(first)) % per_pair
    lab = blk < n_per_pair  # equal number of labelled comparisons per ordered pair
    z = np.zeros(len(first))
    hits = {("human", "delta"): 0, ("human", "paper"): 0, ("ppr", "delta"): 0, ("ppr", "paper"): 0}
    for _ in range(reps):
        theta, judge = R.synthetic_theta(k, u, rng)
        tl, tu = R.true_ranksets(theta)
        w, wh = R.synthetic_outcomes(first, theta, judge, rng)
        for cov in R.COVARIANCES:
            th, sh = R.onesource_theta_sigma(first[lab], second[lab], w[lab], z[lab], k, cov)
            lo, up = R.ranksets(th, sh, alpha)
            hits["human", cov] += bool(R.rankset_covers(lo, up, tl, tu))
            tp, sp, _ = R.ppr_theta_sigma(
                first[~lab],
                second[~lab],
                wh[~lab],
                z[~lab],
                first[lab],
                second[lab],
                w[lab],
                z[lab],
                wh[lab],
                z[lab],
                k,
                covariance=cov,
            )
            lo, up = R.ranksets(tp, sp, alpha)
            hits["ppr", cov] += bool(R.rankset_covers(lo, up, tl, tu))
    return {key: v / reps for key, v in hits.items()}


def test_seeded_coverage_delta_valid_paper_falls_short():
    """Appendix E, scaled down: k = 8, 200 reps, N + n = 5600, n = 224, u = 0.1, alpha = 0.1."""
    reps, alpha = 200, 0.1
    cov = _coverage(np.random.default_rng(20241105), reps, 8, 100, 4, 0.1, alpha)
    se = np.sqrt(alpha * (1 - alpha) / reps)  # 0.021
    for method in ("human", "ppr"):
        assert cov[method, "delta"] >= 1 - alpha - 2 * se, cov
        assert cov[method, "paper"] < 1 - alpha - 3 * se, cov
        assert cov[method, "paper"] < cov[method, "delta"], cov


def test_quality_metrics_and_rbo_exact():
    lo, up = np.array([1, 1, 3]), np.array([2, 2, 3])
    assert R.rankset_size(lo, up) == pytest.approx(5 / 3)
    assert R.rankset_covers(lo, up, np.array([1, 2, 3]), np.array([1, 2, 3]))
    assert not R.rankset_covers(lo, up, np.array([1, 1, 2]), np.array([1, 3, 3]))
    assert R.rankset_intersects(lo, up, np.array([2, 1, 3]), np.array([3, 1, 3]))
    assert not R.rankset_intersects(lo, up, np.array([3, 1, 1]), np.array([3, 1, 2]))
    tl, tu = R.true_ranksets(np.array([0.2, 0.4, 0.4, 0.1]))
    np.testing.assert_array_equal(tl, [3, 1, 1, 4])
    np.testing.assert_array_equal(tu, [3, 2, 2, 4])
    # RBO: identical orders -> 1 - p^k; hand case T = (0,1,2), T_hat = (1,0,2), p = 0.5:
    # overlaps 0/1, 2/2, 3/3 -> 0.5 * (0 + 0.5 * 1 + 0.25 * 1) = 0.375
    assert R.rbo([0, 1, 2], [0, 1, 2], 0.6) == pytest.approx(1 - 0.6**3)
    assert R.rbo([0, 1, 2], [1, 0, 2], 0.5) == pytest.approx(0.375)
    P = R.rank_position_probabilities(np.array([[1, 1, 3], [1, 2, 3]]), np.array([[2, 2, 3], [1, 2, 3]]))
    np.testing.assert_allclose(P, [[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1]])


def test_bad_inputs_raise_user_error():
    with pytest.raises(UserError, match="alpha"):
        R.ranksets(np.zeros(3), np.eye(3), 1.5)
    with pytest.raises(UserError, match="covariance"):
        R.onesource_theta_sigma(FIRST, SECOND, W, W2, 3, "sandwich")
    with pytest.raises(UserError, match="no comparison"):
        R.onesource_theta_sigma(FIRST, SECOND, W, W2, 4)
    with pytest.raises(UserError, match="lambda"):
        R.ppr_theta_sigma(FIRST, SECOND, W, W2, FIRST, SECOND, W, W2, W, W2, 3, lam=2.0)
    with pytest.raises(UserError, match="both"):
        R.onesource_theta_sigma(FIRST, SECOND, np.ones(5), np.ones(5), 3)


def test_synthetic_bench_runs_and_reports_both_covariances():
    from bench import ppr_synthetic

    res = ppr_synthetic.run(reps=4, total=5600, n_values=(560,), us=(0.1,), seed=1)
    keys = {(r["method"], r["n"], r["covariance"]) for r in res["rows"]}
    assert keys == {
        (m, n, c)
        for m, n in (("human", 560), ("ppr u=0.1", 560), ("judge u=0.1", None))
        for c in R.COVARIANCES
    }
    for r in res["rows"]:
        assert 0 <= r["coverage"] <= 1 and 1 <= r["size"] <= 8 and 0 < r["rbo"] <= 1
    assert "| human | 560 |" in ppr_synthetic.markdown(res)


def test_ppr_lambda_paper_form_equals_ppi_plus_plus_form():
    """Algorithm 4 as printed equals docs/METHODS.md's tr(Cov_n) / ((1 + n/N) tr(Var_N)) with per-sample (co)variances."""
    rng = np.random.default_rng(9)
    k = 5
    first, second = R.balanced_design(k, 24)
    theta, judge = R.synthetic_theta(k, 0.3, rng)
    w, wh = R.synthetic_outcomes(first, theta, judge, rng)
    z = np.zeros_like(w)
    lab = np.arange(len(first)) % 5 == 0
    lam = R.ppr_lambda(
        first[~lab],
        second[~lab],
        wh[~lab],
        z[~lab],
        first[lab],
        second[lab],
        w[lab],
        z[lab],
        wh[lab],
        z[lab],
        k,
    )
    n, N = lab.sum(), (~lab).sum()
    Ah = R.winrate_residuals(
        first[lab],
        second[lab],
        wh[lab],
        z[lab],
        R.winrate_pointestimate(first[lab], second[lab], wh[lab], z[lab], k),
        k,
    )
    Ahum = R.winrate_residuals(
        first[lab],
        second[lab],
        w[lab],
        z[lab],
        R.winrate_pointestimate(first[lab], second[lab], w[lab], z[lab], k),
        k,
    )
    AN = R.winrate_residuals(
        first[~lab],
        second[~lab],
        wh[~lab],
        z[~lab],
        R.winrate_pointestimate(first[~lab], second[~lab], wh[~lab], z[~lab], k),
        k,
    )
    ppi = np.trace(Ah @ Ahum.T / n) / ((1 + n / N) * np.trace(AN @ AN.T / N))
    assert 0 < ppi < 1
    assert lam == pytest.approx(ppi, rel=1e-12)
