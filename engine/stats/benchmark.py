"""Statistics layer of the benchmark comparison: pure functions of numbers, no I/O.

Coupled vs independent generation of two models (docs/METHODS.md section 2): the coupled-generation
paper's comparison. Benz et al. 2025, Proposition 1, Fig. 2 and Appendix D.

Pure, vectorised functions over ``(Q, R)`` score matrices (``Q`` questions, ``R`` repeats) of two models
``A``, ``B`` in one noise mode.

Family:

* :func:`per_question_covariance`  Cov_i = sample cov (ddof 1) of (A_ir, B_ir) over r
* :func:`per_question_var_diff`    V_i  = sample var (ddof 1) of A_ir − B_ir over r
* :func:`kde_curve`                Gaussian KDE on a grid (degenerate data handled; reflection at a
  bound)
* :func:`resample_permutations`    the random permutations the error curves share
* :func:`error_curve`              mean |truth − mean of n samples| + 2.5/97.5 percentile band
* :func:`error_curve_naive`        the same with explicit loops (the test oracle)
* :func:`independent_components`   σ²_b, σ²_w of independent generation predicted from a coupled run

The savings (headline variance saving, the paper's resampling-curve saving, the saving predicted
from the per-sample variances) are :mod:`engine.stats.saving`; the paired difference over questions
is :mod:`engine.stats.paired_difference`; the planner is :mod:`engine.stats.planning`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st

from engine.errors import UserError
from engine.stats.paired_difference import check_pair, variance_components_diff


def per_question_covariance(A, B) -> np.ndarray:
    """Per-question covariance of two models' scores over the repeats (coupled mode).

    Cov_i = (1/(R−1)) Σ_r (A_ir − Ā_i)(B_ir − B̄_i).

    Args:
        A, B: (Q, R) scores of the two models, R >= 2.
    Returns:
        (Q,) covariances.
    Paper: Benz et al., Fig. 2(a) (its mean is marked).
    """
    A, B = check_pair(A, B)
    R = A.shape[1]
    if R < 2:
        raise UserError(f"need at least 2 repeats per question for a covariance, got {R}")
    return ((A - A.mean(axis=1, keepdims=True)) * (B - B.mean(axis=1, keepdims=True))).sum(axis=1) / (
        R - 1
    )


def per_question_var_diff(A, B) -> np.ndarray:
    """Per-question variance of the score difference over the repeats.

    V_i = (1/(R−1)) Σ_r (D_ir − D̄_i)²,  D = A − B.  Proposition 1: E V_coupled = E V_indep − 2 E Cov.

    Args:
        A, B: (Q, R) scores, R >= 2.
    Returns:
        (Q,) variances.
    Paper: Benz et al., Fig. 2(b) (the median is marked).
    """
    A, B = check_pair(A, B)
    if A.shape[1] < 2:
        raise UserError(f"need at least 2 repeats per question for a variance, got {A.shape[1]}")
    return (A - B).var(axis=1, ddof=1)


def kde_curve(
    x, grid=None, n_grid: int = 200, fallback_bw: float = 0.02, lower: float | None = None
) -> dict:
    """Gaussian kernel density estimate of ``x`` on a grid (scipy, Scott's rule), optionally
    boundary-corrected by reflection for a quantity that cannot fall below ``lower``.

    f̂(g) = (1/N) Σ_i φ((g − x_i)/h)/h;  with ``lower`` = L (reflection at L):
    f̂_L(g) = f̂(g) + f̂(2L − g) for g >= L and 0 for g < L, so the density still integrates to 1
    on [L, ∞) and puts no mass where the quantity cannot be (a variance below 0). When the data are
    degenerate (all equal, or fewer than 2 points) scipy cannot pick h; the curve then uses
    h = ``fallback_bw`` and says so.

    Args:
        x: (N,) values (all >= ``lower`` when it is given).
        grid: (G,) evaluation points (default: data range ± 3 h, ``n_grid`` points, starting at
            ``lower`` when given).
        lower: the support's lower bound, or None for an unbounded quantity.
    Returns:
        dict with x (grid list), density (list), bandwidth, degenerate (bool), lower.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise UserError("cannot estimate a density from no values")
    if lower is not None and float(x.min()) < lower:
        raise UserError(f"values below the lower bound {lower}: min {float(x.min())}")
    degenerate = x.size < 2 or float(np.ptp(x)) == 0.0
    if not degenerate:
        try:
            kde = _st.gaussian_kde(x)
            h = float(np.sqrt(kde.covariance[0, 0]))
        except np.linalg.LinAlgError:
            degenerate = True
    if degenerate:
        h = fallback_bw
    if grid is None:
        start = x.min() - 3 * h if lower is None else float(lower)
        grid = np.linspace(start, x.max() + 3 * h, n_grid)
    grid = np.asarray(grid, dtype=np.float64)

    def f(g: np.ndarray) -> np.ndarray:
        if degenerate:
            return _st.norm.pdf((g[:, None] - x[None, :]) / h).mean(axis=1) / h  # (G,)
        return kde(g)

    if lower is None:
        dens = f(grid)
    else:
        dens = np.where(
            grid >= lower, f(grid) + f(2 * lower - grid), 0.0
        )  # reflect the mass below L back
    return {
        "x": grid.tolist(),
        "density": dens.tolist(),
        "bandwidth": h,
        "degenerate": bool(degenerate),
        "lower": lower,
    }


def default_sizes(N: int, step: int = 20, max_points: int = 500) -> np.ndarray:
    """Sample sizes n = step, 2 step, ... <= N; step is widened (in multiples of ``step``) so
    that at most ``max_points`` sizes are used on very large pools, and narrowed (to N // 10) on
    pools smaller than 10 steps so that tiny runs still get a curve."""
    if N < 1:
        raise UserError("no samples to resample")
    if N < 10 * step:
        step = max(1, N // 10)
    mult = max(1, math.ceil(N / step / max_points))
    s = step * mult
    sizes = np.arange(s, N + 1, s)
    if sizes.size == 0:
        sizes = np.array([N])
    return sizes


def resample_permutations(
    N: int, n_resamples: int, rng: np.random.Generator, length: int | None = None
) -> np.ndarray:
    """``n_resamples`` independent uniform random permutations of range(N), truncated to ``length``.

    The first n entries of a uniform permutation are a uniform draw of n items without
    replacement, so nested prefixes give every sample size from one permutation.

    Returns:
        (n_resamples, length or N) int64 indices.
    """
    if length is not None and not 1 <= length <= N:
        raise UserError(f"permutation length must lie in 1..{N}, got {length}")
    if length is not None and length * 4 < N:
        # Short prefixes of a big pool: an ordered draw without replacement per row costs O(length)
        # instead of shuffling all N items (same distribution as a permutation's prefix).
        return np.stack(
            [rng.choice(N, size=length, replace=False, shuffle=True) for _ in range(n_resamples)]
        )
    base = np.broadcast_to(np.arange(N, dtype=np.int64), (n_resamples, N))
    perms = rng.permuted(base, axis=1)  # (M, N): each row shuffled independently
    return perms if length is None else perms[:, :length]


def error_curve(diff, sizes, perms: np.ndarray, level: float = 0.95) -> dict:
    """Estimation error of the mean difference vs sample size, by subsampling without replacement.

    truth = mean(diff);  e_{m,n} = |truth − (1/n) Σ_{t<n} diff[perm_m[t]]|;  curve = mean_m e_{m,n},
    band = the (1−level)/2 and (1+level)/2 percentiles of e_{·,n} (2.5% / 97.5% at level 0.95).

    Vectorised: one cumulative sum along each permutation gives every prefix mean at once.

    Args:
        diff: (N,) per-(question, repeat) score differences A − B (flattened).
        sizes: (S,) sample sizes, each in 1..N.
        perms: (M, L) permutation prefixes (from :func:`resample_permutations`), L >= max(sizes).
    Returns:
        dict with n, mean, low, high (lists of S floats) and truth.
    Paper: Benz et al., Fig. 2(c).
    """
    diff = np.asarray(diff, dtype=np.float64).ravel()
    sizes = np.asarray(sizes, dtype=np.int64)
    L = int(sizes.max())
    if sizes.min() < 1 or L > diff.size or L > perms.shape[1]:
        raise UserError(
            f"sample sizes must lie in 1..{min(diff.size, perms.shape[1])}, got {sizes.min()}..{L}"
        )
    truth = float(diff.mean())
    M = perms.shape[0]
    a = (1 - level) / 2 * 100
    errs = np.empty((M, sizes.size))  # (M, S)
    # Chunk the permutations so the (chunk, L) gather + cumsum stays small on big pools.
    chunk = max(1, int(4_000_000 // L))
    for s in range(0, M, chunk):
        csum = np.cumsum(diff[perms[s : s + chunk, :L]], axis=1)  # (c, L)
        errs[s : s + chunk] = np.abs(truth - csum[:, sizes - 1] / sizes)  # (c, S)
    lo, hi = np.percentile(errs, [a, 100 - a], axis=0)
    return {
        "n": sizes.tolist(),
        "mean": errs.mean(axis=0).tolist(),
        "low": lo.tolist(),
        "high": hi.tolist(),
        "truth": truth,
    }


def error_curve_naive(diff, sizes, perms: np.ndarray, level: float = 0.95) -> dict:
    """:func:`error_curve` with explicit loops over sizes and resamples (the test oracle)."""
    diff = np.asarray(diff, dtype=np.float64).ravel()
    truth = float(np.mean(diff))
    a = (1 - level) / 2 * 100
    means, lows, highs = [], [], []
    for n in sizes:
        e = [abs(truth - float(np.mean(diff[perms[m, :n]]))) for m in range(perms.shape[0])]
        means.append(float(np.mean(e)))
        lows.append(float(np.percentile(e, a)))
        highs.append(float(np.percentile(e, 100 - a)))
    return {"n": [int(n) for n in sizes], "mean": means, "low": lows, "high": highs, "truth": truth}


def independent_components(A, B) -> dict:
    """Variance components of d under INDEPENDENT generation, predicted from a COUPLED run.

    σ²_w,ind = mean_i (var_r A_ir + var_r B_ir) (ddof 1: = mean_i [V_i + 2 Cov_i], Proposition 1);
    σ²_b is the variance of the true per-question mean difference, the same in both modes.

    Args:
        A, B: (n, k) coupled-run scores, k >= 2.
    Returns:
        dict with sigma2_between, sigma2_within, Q, R (like :func:`variance_components_diff`).
    """
    A, B = check_pair(A, B)
    if A.shape[1] < 2:
        raise UserError(f"need at least 2 repeats per question, got {A.shape[1]}")
    comp = variance_components_diff(A, B)
    comp["sigma2_within"] = float((A.var(axis=1, ddof=1) + B.var(axis=1, ddof=1)).mean())
    return comp
