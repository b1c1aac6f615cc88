"""Statistics layer of per-slice results: pure functions of numbers, no I/O.

Per-slice paired differences with simultaneous intervals (pure statistics): a benchmark's subjects,
a harness group's subtasks, a set's categories (docs/METHODS.md 7.1 per slice, 7.3's max-t idea across
slices).

Per question ``i`` of slice ``s`` (slices are disjoint sets of questions), ``d_i ∈ [−1, 1]`` is the
paired difference of METHODS 7.1 (mean over repeats of score A − score B). Per slice, with the
Agresti-Min adjustment (two pseudo-questions: half a question at +1, half at −1, one at 0):

    n'_s = n_s + 2,   Δ̃_s = Σ_{i in s} d_i / n'_s,
    SE_s = sqrt( (Σ_{i in s} (d_i − Δ̃_s)² + ½(1 − Δ̃_s)² + ½(1 + Δ̃_s)² + Δ̃_s²) / ((n'_s − 1) n'_s) )
    simultaneous CI_s = Δ̃_s ± c SE_s,   c solves Π_s (2 F_{t, n_s − 1}(c) − 1) = 1 − α

``c`` is the (1 − α) quantile of max_s |T_s|: slices hold different questions and questions are
independent, so the max-t distribution factorises over slices. The adjustment keeps a slice whose
questions all agree (every d_i = 0: common with coupled runs of near-identical models) from collapsing
to a point interval that excludes the truth; it vanishes as n_s grows. ``difference`` reports the plain
mean Δ̂_s = Σ d_i / n_s. Guarantee (asymptotic in the questions per slice): P(every slice's Δ_s lies in its
interval) ≥ 1 − α, simultaneously; measured by the seeded simulation in tests/test_slices_stats.py
(0.95-0.96 at α = 0.05 with 15-60 questions per slice on the hardest populations tried, conservative on
the others; per-slice 95% intervals cover all 12 slices at once in about half the runs).

Clustered rows (win-rates by category, METHODS 7.2: a prompt is a cluster and carries several
comparisons): ``weights`` m_c = rows of cluster c, ``d_c`` the mean of its rows, ``n_s`` the clusters.
Then Δ̂_s = Σ m_c d_c / N_s (N_s = Σ_{c in s} m_c: the row-pooled mean, a ratio estimator), and the two
pseudo-clusters of the adjustment hold m̄_s = N_s / n_s rows each:

    N'_s = N_s + 2 m̄_s,   Δ̃_s = Σ m_c d_c / N'_s,
    SE_s² = n'_s / (n'_s − 1) · (Σ m_c² (d_c − Δ̃_s)² + m̄_s² (½(1 − Δ̃_s)² + ½(1 + Δ̃_s)² + Δ̃_s²)) / N'_s²

the linearised cluster-robust (sandwich, CR1) SE of a ratio with t_{n_s − 1}; every m_c = 1 gives the
formula above exactly. A cluster must lie in one slice (else slices share clusters and the product rule
fails): the caller checks it.

P-values: ``p_value`` the per-slice two-sided test of Δ_s = 0 on the same statistic (t_{n_s − 1});
``p_adjusted`` Benjamini-Hochberg over slices (false discovery rate); ``p_maxt`` the single-step max-t
adjusted value 1 − Π_s' (2 F_{n_s' − 1}(|t_s|) − 1) (family-wise: an interval excludes 0 exactly when
p_maxt < α).

Papers: Agresti & Min (2005), "Simple improved confidence intervals for comparing matched proportions",
Statistics in Medicine; Šidák (1967) for the product rule of independent statistics; Romano & Wolf
(2005) for max-t simultaneous inference; Benjamini & Hochberg (1995).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize
from scipy import stats as _st

from engine.errors import UserError


def bh_adjust(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values: p_(i) m / i made monotone from the largest, capped at 1
    (NaN entries left out of m and returned as NaN).

    Args:
        p: (m,) p-values.
    Returns:
        (m,) adjusted.
    """
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adj = p[order] * m / np.arange(1, m + 1)
    adj = np.minimum.accumulate(adj[::-1])[::-1]
    out[order] = np.minimum(adj, 1.0)
    return out


def slice_moments(
    d: np.ndarray, slices: np.ndarray, S: int, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(n_s, Δ̂_s, Δ̃_s, SE_s) per slice: plain (row-pooled) mean, Agresti-Min adjusted mean and its SE
    (module docstring); NaN where n_s = 0.

    Args:
        d: (n,) per-question (per-cluster) differences in [−1, 1]; slices: (n,) codes in [0, S); S:
        slices; weights: (n,) rows per cluster m_c >= 1, or None (every m_c = 1).
    Returns:
        four (S,) arrays; n_s counts the questions (clusters).
    """
    d = np.asarray(d, float)
    s = np.asarray(slices, np.int64)
    w = np.ones_like(d) if weights is None else np.asarray(weights, float)
    n = np.bincount(s, minlength=S).astype(float)
    rows = np.bincount(s, weights=w, minlength=S)
    total = np.bincount(s, weights=w * d, minlength=S)
    with np.errstate(invalid="ignore", divide="ignore"):
        mbar = rows / n  # rows of each pseudo-cluster
        rows2 = rows + 2 * mbar
        adj = total / rows2
        ss = np.bincount(s, weights=(w * (d - adj[s])) ** 2, minlength=S)
        ss += mbar**2 * (0.5 * (1 - adj) ** 2 + 0.5 * (1 + adj) ** 2 + adj**2)
        n2 = n + 2
        mean = np.where(n > 0, total / rows, np.nan)
        se = np.where(n > 0, np.sqrt(ss * n2 / (n2 - 1)) / rows2, np.nan)
    return n, mean, np.where(n > 0, adj, np.nan), se


def maxt_critical(df: np.ndarray, alpha: float) -> float:
    """c with Π_s (2 F_{t, df_s}(c) − 1) = 1 − α: the (1 − α) quantile of the maximum of independent
    |t_{df_s}| (one slice: the two-sided t quantile).

    Args:
        df: (S,) degrees of freedom (>= 1); alpha in (0, 1).
    """
    df = np.asarray(df, float)

    def f(c: float) -> float:
        return float(np.sum(np.log(np.maximum(2 * _st.t.cdf(c, df) - 1, 1e-300)))) - np.log1p(-alpha)

    hi = 10.0
    while f(hi) < 0:
        hi *= 2
    return float(optimize.brentq(f, 1e-9, hi, xtol=1e-10))


def slice_differences(
    d: np.ndarray, slices: np.ndarray, S: int, alpha: float = 0.05, weights: np.ndarray | None = None
) -> dict:
    """Per-slice paired differences with simultaneous max-t intervals and adjusted p-values.

    Args:
        d: (n,) per-question differences A − B in [−1, 1] (or per-cluster means, with ``weights``);
        slices: (n,) codes in [0, S); S: number of slices (each with at least one question); alpha:
        family-wise error of the intervals; weights: (n,) rows per cluster (>= 1), or None (one each).
    Returns:
        dict of (S,) arrays n (questions / clusters), difference (plain, row-pooled mean), adjusted
        (Agresti-Min centre), se, lower, upper, p_value, p_adjusted (BH), p_maxt, and the critical
        value ``c``.
    """
    if not 0 < alpha < 1:
        raise UserError(f"alpha must be in (0, 1); got {alpha}")
    d = np.asarray(d, float)
    if d.size == 0 or S < 1:
        raise UserError("no question to compare")
    if np.any(np.abs(d) > 1 + 1e-12):
        raise UserError("paired differences must lie in [-1, 1] (scores in [0, 1])")
    if weights is not None and (np.shape(weights) != d.shape or np.any(np.asarray(weights) < 1)):
        raise UserError(f"weights must be {d.shape} rows per cluster, each >= 1")
    n, mean, adj, se = slice_moments(d, slices, S, weights)
    if np.any(n == 0):
        raise UserError(f"every slice needs a question; {int(np.sum(n == 0))} have none")
    df = np.maximum(n - 1, 1)
    c = maxt_critical(df, alpha)
    t = adj / se
    p = 2 * _st.t.sf(np.abs(t), df)
    # P(max_s' |T_s'| >= |t_s|) = 1 − Π_s' P(|T_s'| < |t_s|)
    inside = 2 * _st.t.cdf(np.abs(t)[:, None], df[None, :]) - 1  # (S, S)
    p_maxt = -np.expm1(np.sum(np.log(np.maximum(inside, 1e-300)), axis=1))
    return {
        "n": n.astype(int),
        "difference": mean,
        "adjusted": adj,
        "se": se,
        "lower": adj - c * se,
        "upper": adj + c * se,
        "p_value": p,
        "p_adjusted": bh_adjust(p),
        "p_maxt": np.clip(p_maxt, 0.0, 1.0),
        "c": c,
    }
