"""Win-rates, CIs, z-tests, Davidson Bradley-Terry and Elo (docs/METHODS.md section 3)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from engine.errors import UserError
from engine.stats import winrates as wr

P_PREF = np.array([[0.4, 1.0], [0.48, 0.9], [0.5, 0.89]])  # (models, prompts)


def test_methods_section3_exact_population_winrates():
    q = np.array([0.5, 0.5])
    np.testing.assert_allclose(
        wr.population_average_winrate(P_PREF, q, "coupled"), [0.0525, 0.0225, 0.03]
    )
    np.testing.assert_allclose(
        wr.population_average_winrate(P_PREF, q, "independent"), [0.1545, 0.15675, 0.16225]
    )
    with pytest.raises(UserError, match="mode"):
        wr.population_average_winrate(P_PREF, q, "paired")


def _gumbel_max_pairs(rng, n_units, coupled):
    """Sample the single-token answers with Gumbel-max (shared noise if coupled) and emit all pairs."""
    k = P_PREF.shape[0]
    qs = rng.integers(0, 2, n_units)  # (U,) prompt of each unit
    logp = np.log(np.stack([P_PREF[:, qs], 1 - P_PREF[:, qs] + 1e-300], axis=-1))  # (k, U, 2)
    g = rng.gumbel(size=(1 if coupled else k, n_units, 2))  # shared noise across models when coupled
    pref = np.argmax(logp + g, axis=-1) == 0  # (k, U): answered the preferred answer
    a, b, out = [], [], []
    for i in range(k):
        for j in range(i + 1, k):
            a.append(np.full(n_units, i))
            b.append(np.full(n_units, j))
            out.append(
                np.where(pref[i] & ~pref[j], wr.A_WINS, np.where(pref[j] & ~pref[i], wr.B_WINS, wr.TIE))
            )
    return np.concatenate(a), np.concatenate(b), np.concatenate(out)


@pytest.mark.parametrize("coupled", [True, False])
def test_simulated_winrates_converge_to_exact_values(coupled):
    rng = np.random.default_rng(7 + coupled)
    a, b, out = _gumbel_max_pairs(rng, 40_000, coupled)
    W, T, n = wr.winrate_matrix(a, b, out, 3)
    avg, lo, hi = wr.average_winrate(W, n)
    exact = wr.population_average_winrate(
        P_PREF, np.array([0.5, 0.5]), "coupled" if coupled else "independent"
    )
    assert np.all(np.abs(avg - exact) < 4 * (hi - lo) / (2 * 1.96)), (avg, exact)


def test_winrate_matrix_matches_naive_loop():
    rng = np.random.default_rng(0)
    k, nn = 5, 300
    a = rng.integers(0, k, nn)
    b = (a + rng.integers(1, k, nn)) % k
    out = rng.integers(0, 3, nn)
    W, T, n = wr.winrate_matrix(a, b, out, k)
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            wins = ties = tot = 0
            for x, y, o in zip(a, b, out):
                if {x, y} == {i, j}:
                    tot += 1
                    ties += o == 2
                    wins += (o == 0 and x == i) or (o == 1 and y == i)
            assert n[i, j] == tot
            assert W[i, j] == pytest.approx(wins / tot)
            assert T[i, j] == pytest.approx(ties / tot)
    off = ~np.eye(k, dtype=bool)
    np.testing.assert_allclose((W + W.T + T)[off], 1.0)


def test_wilson_matches_scipy_and_exact_value():
    lo, hi = wr.wilson_interval(5, 10)
    assert (lo, hi) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    x = np.array([0, 3, 17, 40])
    n = np.array([10, 25, 40, 40])
    lo, hi = wr.wilson_interval(x, n)
    for xi, ni, l, h in zip(x, n, lo, hi):
        ci = stats.binomtest(int(xi), int(ni)).proportion_ci(0.95, method="wilson")
        assert (l, h) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert np.isnan(wr.wilson_interval(0, 0)[0])


def test_ztest_equals_chi_square_and_stars():
    x1, n1, x2, n2 = 120, 400, 90, 410
    z, p = wr.two_proportion_ztest(x1, n1, x2, n2)
    chi2, p_chi, _, _ = stats.chi2_contingency([[x1, n1 - x1], [x2, n2 - x2]], correction=False)
    assert z**2 == pytest.approx(chi2)
    assert p == pytest.approx(p_chi)
    np.testing.assert_array_equal(
        wr.significance_stars([0.2, 0.04, 0.005, 5e-4, 5e-5]), ["", "*", "**", "***", "****"]
    )
    z0, p0 = wr.two_proportion_ztest(0, 10, 0, 10)
    assert z0 == 0 and p0 == 1


def test_ztest_level_by_simulation():
    rng = np.random.default_rng(3)
    x1 = rng.binomial(300, 0.3, 4000)
    x2 = rng.binomial(250, 0.3, 4000)
    _, p = wr.two_proportion_ztest(x1, 300, x2, 250)
    rej = np.mean(p < 0.05)
    assert abs(rej - 0.05) < 4 * np.sqrt(0.05 * 0.95 / 4000)


def test_average_winrate_delta_ci_agrees_with_bootstrap():
    rng = np.random.default_rng(5)
    k, nn = 4, 2000
    a = rng.integers(0, k, nn)
    b = (a + rng.integers(1, k, nn)) % k
    strength = np.array([0.0, 0.5, 1.0, 1.5])
    p_a = 1 / (1 + np.exp(strength[b] - strength[a]))
    u = rng.random(nn)
    out = np.where(u < 0.2, wr.TIE, np.where(u < 0.2 + 0.8 * p_a, wr.A_WINS, wr.B_WINS))
    W, T, n = wr.winrate_matrix(a, b, out, k)
    avg, lo, hi = wr.average_winrate(W, n)

    def stat(a_, b_, o_, k_):
        W_, _, n_ = wr.winrate_matrix(a_, b_, o_, k_)
        return wr.average_winrate(W_, n_)[0]

    blo, bhi, draws = wr.bootstrap_ci(stat, a, b, out, k, np.random.default_rng(6), reps=300)
    np.testing.assert_allclose(draws.std(axis=0), (hi - lo) / (2 * 1.96), rtol=0.2)


def _davidson_sample(rng, beta, nu, nn):
    k = len(beta)
    a = rng.integers(0, k, nn)
    b = (a + rng.integers(1, k, nn)) % k
    P, Pt = wr.davidson_probabilities(beta, nu)
    u = rng.random(nn)
    pa, pt = P[a, b], Pt[a, b]
    return a, b, np.where(u < pa, wr.A_WINS, np.where(u < pa + pt, wr.TIE, wr.B_WINS))


def test_davidson_mm_equals_direct_likelihood_maximisation():
    rng = np.random.default_rng(11)
    beta_true = np.array([-1.0, -0.3, 0.2, 1.1])
    a, b, out = _davidson_sample(rng, beta_true, 0.6, 3000)
    beta, nu = wr.davidson_fit(a, b, out, 4)

    def nll(x):
        bb = np.concatenate([[0.0], x[:3]])
        return -wr.davidson_loglik(bb - bb.mean(), np.exp(x[3]), a, b, out)

    res = optimize.minimize(nll, np.zeros(4), method="BFGS", options={"gtol": 1e-9})
    bb = np.concatenate([[0.0], res.x[:3]])
    np.testing.assert_allclose(beta, bb - bb.mean(), atol=1e-5)
    assert nu == pytest.approx(np.exp(res.x[3]), abs=1e-5)
    # and it recovers the truth within sampling error
    np.testing.assert_allclose(beta, beta_true - beta_true.mean(), atol=0.15)
    assert nu == pytest.approx(0.6, abs=0.1)


def test_davidson_no_ties_and_order():
    a = np.array([0, 0, 1, 1, 2, 2, 0])
    b = np.array([1, 2, 2, 0, 0, 1, 1])
    out = np.array([0, 0, 0, 1, 1, 0, 1])
    beta, nu = wr.davidson_fit(a, b, out, 3)
    assert nu == 0.0
    assert beta[0] > beta[1] > beta[2]


def test_elo_exact_two_games_and_bootstrap():
    r = wr.elo_ratings([0, 0], [1, 1], [wr.A_WINS, wr.TIE], 2, K=32)
    e = 1 / (1 + 10 ** ((984 - 1016) / 400))
    assert r[0] == pytest.approx(1016 + 32 * (0.5 - e))
    assert r[1] == pytest.approx(984 - 32 * (0.5 - e))
    rng = np.random.default_rng(2)
    a, b, out = _davidson_sample(rng, np.array([-1.0, 0.0, 1.0]), 0.3, 1500)
    lo, hi, draws = wr.bootstrap_ci(
        lambda *x: wr.elo_ratings(*x), a, b, out, 3, np.random.default_rng(3), reps=50
    )
    assert np.all(lo < hi) and draws.shape == (50, 3)
    assert np.argmax(draws.mean(axis=0)) == 2 and np.argmin(draws.mean(axis=0)) == 0


def test_bad_inputs():
    with pytest.raises(UserError, match="outcome"):
        wr.winrate_matrix([0], [1], [3], 2)
    with pytest.raises(UserError, match="different"):
        wr.winrate_matrix([0], [0], [0], 2)
    with pytest.raises(UserError, match="indices"):
        wr.winrate_matrix([0], [5], [0], 2)
