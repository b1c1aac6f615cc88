"""engine/stats/slices.py: Benjamini-Hochberg and the slice moments against naive loops, the wild max-t
draws against a per-draw recomputation, and a seeded simulation of the simultaneous coverage over
slices (against per-slice t intervals, which do not cover simultaneously)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from engine.errors import UserError
from engine.stats import slices as SL


def _bh_naive(p):
    m = len(p)
    out = []
    for i in range(m):
        # adjusted p_i = min over j with p_j >= p_i of p_j m / rank_j
        ranks = sorted(range(m), key=lambda j: p[j])
        rank_of = {j: r + 1 for r, j in enumerate(ranks)}
        out.append(min(1.0, min(p[j] * m / rank_of[j] for j in range(m) if p[j] >= p[i])))
    return out


def test_bh_exact_and_against_a_naive_loop():
    np.testing.assert_allclose(SL.bh_adjust([0.01, 0.04, 0.03, 0.5]), [0.04, 0.16 / 3, 0.16 / 3, 0.5])
    rng = np.random.default_rng(1)
    p = rng.random(40) ** 2
    np.testing.assert_allclose(SL.bh_adjust(p), _bh_naive(list(p)))
    out = SL.bh_adjust([0.2, np.nan, 0.01])
    assert np.isnan(out[1]) and out[2] == pytest.approx(0.02) and out[0] == pytest.approx(0.2)


def test_moments_against_a_naive_loop():
    rng = np.random.default_rng(3)
    S = 5
    sl = rng.integers(0, S, 80)
    d = rng.choice([-1.0, 0.0, 0.0, 1.0, 0.5], 80)
    n, mean, adj, se = SL.slice_moments(d, sl, S)
    for s in range(S):
        x = np.concatenate([d[sl == s], [1.0, -1.0, 0.0, 0.0]])  # Agresti-Min: 4 halves
        w = np.concatenate([np.ones((sl == s).sum()), [0.5, 0.5, 0.5, 0.5]])
        m = np.sum(w * x) / w.sum()
        var = np.sum(w * (x - m) ** 2) / (w.sum() - 1)
        assert n[s] == (sl == s).sum() and mean[s] == pytest.approx(d[sl == s].mean())
        assert adj[s] == pytest.approx(m) and se[s] == pytest.approx(np.sqrt(var / w.sum()))


def test_maxt_critical_value_and_adjusted_p():
    assert SL.maxt_critical(np.array([9]), 0.05) == pytest.approx(st.t.ppf(0.975, 9))
    sidak = st.t.ppf(1 - (1 - 0.95 ** (1 / 4)) / 2, 20)  # equal df: the Sidak quantile
    assert SL.maxt_critical(np.full(4, 20), 0.05) == pytest.approx(sidak)
    # Monte Carlo: the max of independent |t| with these df exceeds c in 5% of draws
    rng = np.random.default_rng(0)
    df = np.array([4, 10, 30])
    c = SL.maxt_critical(df, 0.05)
    draws = np.abs(rng.standard_t(df, size=(100_000, 3))).max(axis=1)
    assert np.mean(draws > c) == pytest.approx(0.05, abs=0.004)
    d = np.r_[np.ones(6), -np.ones(2), np.zeros(30), rng.choice([-1.0, 0.0, 1.0], 20)]
    sl = np.r_[np.zeros(8, int), np.ones(30, int), np.full(20, 2)]
    out = SL.slice_differences(d, sl, 3)
    t = out["adjusted"] / out["se"]
    for s in range(3):
        ref = np.mean(np.abs(rng.standard_t(out["n"] - 1, size=(100_000, 3))).max(axis=1) >= abs(t[s]))
        assert out["p_maxt"][s] == pytest.approx(ref, abs=0.005)
        assert (out["p_maxt"][s] < 0.05) == (out["lower"][s] > 0 or out["upper"][s] < 0)


def test_a_slice_that_always_agrees_keeps_an_interval():
    """Every d_i = 0 (two models agreeing on all 30 questions): the plain SE is 0, the adjusted one is
    not, so the interval is not the point 0 (a 1% disagreement rate would be excluded by it)."""
    out = SL.slice_differences(np.zeros(30), np.zeros(30, int), 1)
    assert out["difference"][0] == 0 and out["lower"][0] < -0.01 and out["upper"][0] > 0.01
    assert out["p_value"][0] == pytest.approx(1.0)
    with pytest.raises(UserError, match="alpha"):
        SL.slice_differences(np.zeros(3), np.zeros(3, int), 1, alpha=1.5)
    with pytest.raises(UserError, match=r"\[-1, 1\]"):
        SL.slice_differences(np.array([2.0]), np.zeros(1, int), 1)


def _population(rng, S):
    """Per slice a distribution of d over {-1, 0, 1} (coupled-like: mostly 0) and its mean."""
    probs = rng.dirichlet([1, 4, 1], S)
    return probs, probs[:, 2] - probs[:, 0]


def test_simultaneous_coverage_over_slices():
    """Seeded: 12 slices of 15-60 questions, d in {-1, 0, 1}, alpha 0.05, 400 replications each of two
    populations: per slice a Dirichlet(1, 4, 1) draw of P(-1, 0, 1) (some slices almost always 0, as
    coupled runs of similar models give), and a low-disagreement one (A ahead by 1 point: 1.5% vs
    0.5%; most slices see only zeros). The max-t intervals cover every slice's Δ_s at once in >= 0.95 - 2 MC s.e.; per-slice 95% t
    intervals on the plain means cover all slices at once far less often."""
    rng = np.random.default_rng(2028)
    S, reps, alpha = 12, 400, 0.05
    sizes = rng.integers(15, 61, S)
    sl = np.repeat(np.arange(S), sizes)
    populations = [_population(rng, S)[0], np.tile([0.005, 0.98, 0.015], (S, 1))]
    tq = st.t.ppf(1 - alpha / 2, sizes - 1)
    for probs in populations:
        truth = probs[:, 2] - probs[:, 0]
        cover = naive = 0
        for _ in range(reps):
            d = np.concatenate([rng.choice([-1.0, 0.0, 1.0], n, p=p) for n, p in zip(sizes, probs)])
            out = SL.slice_differences(d, sl, S, alpha)
            cover += bool(np.all((out["lower"] <= truth) & (truth <= out["upper"])))
            sd = np.array([d[sl == s].std(ddof=1) for s in range(S)]) / np.sqrt(sizes)
            nl, nh = out["difference"] - tq * sd, out["difference"] + tq * sd
            naive += bool(np.all((nl <= truth) & (truth <= nh)))
        rate, se = cover / reps, np.sqrt(0.95 * 0.05 / reps)
        assert rate >= 0.95 - 2 * se, rate
        assert naive / reps < 0.8, naive / reps
