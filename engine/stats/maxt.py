"""Rank-set procedures: Algorithm 2 (chi^2 projection), simultaneous max-t step-down and marginal max-t.

docs/METHODS.md sections 4 (Algorithm 2, Chatzi et al. 2024) and 7.3 (max-t, after Mogstad, Romano,
Shaikh & Wilhelm). The max-t critical value is calibrated in one of two ways:

* ``normal``: Z ~ N(0, Sigma_hat) (n_draws seeded standard normals), t*_ij = (Z_i - Z_j)/s_ij
  (docs/METHODS.md 7.3 as written; treats Sigma_hat as known);
* ``wild``: the wild cluster bootstrap-t (Rademacher weights per prompt, Cameron, Gelbach &
  Miller 2008): each draw re-weights the prompts' residual sums, re-estimates theta AND
  Sigma, and studentises with its own s*_ij, so the critical value accounts for estimating
  Sigma from few prompts (docs/REPRODUCTION.md, "Statistical choices beyond docs/METHODS.md":
  the normal calibration covers 0.92 at nominal 0.95 with 60 prompts, the wild one 0.95).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from engine.errors import UserError

CALIBRATIONS = ("wild", "normal")
# the wild bootstrap-t costs n_draws x C x k^2: above these sizes the normal calibration is used
# (its error is O(1/C), below the Monte Carlo error at thousands of prompts)
WILD_MAX_CLUSTERS = 2000
WILD_MAX_MODELS = 30


def check_alpha(alpha) -> np.ndarray:
    """α (a number or an array of them) as float64, each in (0, 1); else one UserError naming it."""
    try:
        a = np.asarray(alpha, dtype=float)
    except (TypeError, ValueError):
        raise UserError(f"alpha must be a number in (0, 1); got {alpha!r}") from None
    if np.any(~np.isfinite(a)) or np.any(a <= 0) or np.any(a >= 1):
        raise UserError(f"alpha must be in (0, 1); got {alpha!r}")
    return a


def ranksets(theta: np.ndarray, sigma: np.ndarray, alpha) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2: [l(m), u(m)] with l = 1 + #{j : theta_j > theta_m, separated}, u = k - #{j : theta_j
    < theta_m, separated}.

    A pair (i, j) is separated iff |theta_i - theta_j| > sqrt(q (Sigma_ii + Sigma_jj - 2 Sigma_ij)),
    q = chi^2_{k, 1-alpha} quantile (k degrees of freedom, as in the paper). Rank 1 = best.
    Guarantee: if the ellipsoid covers theta with prob. >= 1 - alpha, every true rank-set lies
    inside its estimate with prob. >= 1 - alpha (Theorem 4.1). Vectorised over pairs, over a
    batch of estimates and over several alphas.

    Args:
        theta: (..., k) estimates; sigma: (..., k, k) covariances (same leading shape).
        alpha: scalar or (A,) array of levels in (0, 1).
    Returns:
        lower, upper: int arrays of shape (..., k) for a scalar alpha, (A, ..., k) for an array.
    """
    a = check_alpha(alpha)
    theta = np.asarray(theta, float)
    sigma = np.asarray(sigma, float)
    k = theta.shape[-1]
    q = stats.chi2.ppf(1.0 - a, df=k)  # () or (A,)
    var_diff = (
        np.diagonal(sigma, axis1=-2, axis2=-1)[..., :, None]
        + np.diagonal(sigma, axis1=-2, axis2=-1)[..., None, :]
        - 2.0 * sigma
    )  # (..., k, k)
    gap = theta[..., :, None] - theta[..., None, :]  # (..., k, k): theta_i - theta_j
    # why max(., 0): rounding can make a variance of a difference slightly negative
    var_diff = np.maximum(var_diff, 0.0)
    q_b = q.reshape(q.shape + (1,) * theta.ndim + (1,))  # (A?, 1.., 1, 1)
    # the distance of Eq. 10, written as the paper does (same rounding at the boundary)
    d = np.abs(gap) / np.sqrt(2) - np.sqrt(var_diff * (q_b / 2))  # (A?, ..., k, k)
    sep = d > 0
    lower = 1 + np.sum(sep & (gap < 0), axis=-1)  # others separated and better
    upper = k - np.sum(sep & (gap > 0), axis=-1)  # others separated and worse
    return lower.astype(int), upper.astype(int)


PROCEDURES = ("maxt", "marginal", "chi2")


def _sqrt_psd(sigma: np.ndarray) -> np.ndarray:
    """L with L L^T = Sigma, from eigh with negative rounding eigenvalues clipped to 0 (Sigma may be
    singular)."""
    lam, V = np.linalg.eigh(np.asarray(sigma, float))
    return V * np.sqrt(np.maximum(lam, 0.0))  # (k, k)


def _pair_scales(sigma: np.ndarray) -> np.ndarray:
    """s_ij = sqrt(Sigma_ii + Sigma_jj - 2 Sigma_ij), (k, k)."""
    d = np.diagonal(sigma)
    return np.sqrt(np.maximum(d[:, None] + d[None, :] - 2.0 * sigma, 0.0))


def maxt_normals(k: int, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """The (n_draws, k) standard normals the max-t procedure uses (rng.standard_normal, one call)."""
    return rng.standard_normal((n_draws, k))


def normal_null_draws(sigma: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """Null draws of every t_ij under the normal calibration: (Z_i - Z_j)/s_ij, Z = normals L^T ~ N(0,
    Sigma).

    Args:
        sigma: (k, k); normals: (D, k) standard normals.
    Returns:
        (D, k, k) draws (0 where s_ij = 0).
    """
    s = _pair_scales(sigma)
    Z = normals @ _sqrt_psd(sigma).T  # (D, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, (Z[:, :, None] - Z[:, None, :]) / np.where(s > 0, s, 1.0), 0.0)


def cluster_totals(
    first, second, y, y2, codes: np.ndarray, C: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-prompt sums of the outcomes and counts of a win-rate estimator theta_m = Y_m / N_m.

    Y[c, m] = sum of y over rows of prompt c where m is first + sum of y2 where m is second;
    N[c, m] = number of those rows.

    Args:
        first, second: (n,) model indices; y, y2: (n,) outcomes; codes: (n,) prompt codes in [0, C).
    Returns:
        Y (C, k), N (C, k).
    """
    Y = np.zeros((C, k))
    N = np.zeros((C, k))
    np.add.at(Y, (codes, first), np.asarray(y, float))
    np.add.at(Y, (codes, second), np.asarray(y2, float))
    np.add.at(N, (codes, first), 1.0)
    np.add.at(N, (codes, second), 1.0)
    return Y, N


def wild_maxt_draws(
    sources, rng: np.random.Generator, n_draws: int = 10_000, chunk_elems: int = 4_000_000
) -> np.ndarray:
    """Null draws of every t_ij by the wild cluster bootstrap-t (Rademacher weights, one per prompt).

    theta = sum_s lambda_s Y_s.sum(0) / c_s with c_s = N_s.sum(0) (one source: Algorithm 3; PPR:
    lambda a - b); per prompt u_sc = Y_sc - e_s N_sc (e_s = the source's estimate). Draw b:
    v_bc = +-1; Y*_sc = e_s N_sc + v_bc u_sc; theta*_b and its cluster-robust Sigma*_b are
    re-estimated, t*_ij = ((theta*_i - theta*_j) - (theta_i - theta_j)) / s*_ij. The (1 - alpha)
    quantile of max t* over a set of pairs is the max-t critical value (studentised per draw, so
    it accounts for the noise of Sigma_hat with few prompts). Prompts are matched across sources
    (a prompt in both PPR sets gets one weight).

    Args:
        sources: list of (lambda_s, Y_s (C, k), N_s (C, k)), one C for all (from :func:`cluster_totals`).
        rng: randomness; n_draws: D.
    Returns:
        (D, k, k) draws (0 where s*_ij = 0).
    """
    Ubar, E, lams, UC = None, [], [], []
    for lam, Y, N in sources:
        c = N.sum(axis=0)
        if np.any(c == 0):
            raise UserError("every model needs a comparison in every source for the wild bootstrap")
        e = Y.sum(axis=0) / c
        u = Y - e * N  # (C, k) residual sums about the source's estimate
        Ubar = lam * u / c if Ubar is None else Ubar + lam * u / c
        E.append(N / c)
        lams.append(lam)
        UC.append(u / c)
    assert Ubar is not None, "wild_maxt_draws needs at least one source"
    C, k = Ubar.shape
    S = len(lams)
    # Why not re-form the residuals: U*_b = v_b Ubar - sum_s lam_s delta_bs En_s is (b, C, k) and
    # U*_b^T U*_b a batched small matmul. Expanded with v_bc^2 = 1, Sigma*_b is a constant, the draws'
    # linear terms and a (S, S, k, k) quadratic form: two GEMMs over the prompts (v @ ...),
    # 2.8-8.3x less CPU at 10,000 draws (bench/bench_wild_bootstrap.py).
    G0 = Ubar.T @ Ubar  # (k, k) sum_c v_bc^2 Ubar_c Ubar_c^T
    X = np.stack([Ubar[:, :, None] * En[:, None, :] for En in E], 1).reshape(C, S * k * k)  # (C, S k k)
    Es = np.stack(E)  # (S, C, k)
    H = np.einsum("sci,tcj->stij", Es, Es)  # (S, S, k, k) sum_c En_s,ci En_t,cj
    UCs = np.stack(UC, 1).reshape(C, S * k)  # (C, S k)
    lam_s = np.asarray(lams, float)[None, :, None]  # (1, S, 1)
    out = np.empty((n_draws, k, k))
    step = max(1, chunk_elems // (k * max(C, S * k)))
    for s in range(0, n_draws, step):
        b = min(step, n_draws - s)
        v = rng.integers(0, 2, size=(b, C)) * 2.0 - 1.0  # (b, C) Rademacher
        ld = lam_s * (v @ UCs).reshape(b, S, k)  # (b, S, k) lam_s (e*_s - e_s)
        dtheta = ld.sum(1)  # (b, k) theta* - theta_hat
        A = (v @ X).reshape(b, S, k, k)  # sum_c v_bc Ubar_ci En_s,cj
        cross = np.einsum("bsij,bsj->bij", A, ld)  # (b, k, k)
        quad = np.einsum("bsi,btj,stij->bij", ld, ld, H)  # (b, k, k)
        sig = G0[None] - cross - cross.transpose(0, 2, 1) + quad  # (b, k, k) = U*_b^T U*_b
        d = np.diagonal(sig, axis1=1, axis2=2)
        sc = np.sqrt(np.maximum(d[:, :, None] + d[:, None, :] - 2 * sig, 0.0))  # (b, k, k)
        gap = dtheta[:, :, None] - dtheta[:, None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s : s + b] = np.where(sc > 0, gap / np.where(sc > 0, sc, 1.0), 0.0)
    return out


def wild_draws_means(M: np.ndarray, rng: np.random.Generator, n_draws: int = 10_000) -> np.ndarray:
    """Wild cluster bootstrap-t null draws (D, k, k) for theta = column means of M, Sigma = Cov(M)/C.

    The rows of M (C, k) are the clusters (a question's mean score per model, say): one source of
    :func:`wild_maxt_draws` with Y = M, N = 1, whose Sigma* is the ddof-0 form sum_c u*_c u*_c^T / C^2;
    the draws are multiplied by sqrt((C - 1)/C) so that each is studentised by the same ddof-1
    covariance Cov(M*)/C as the observed t_ij (the bootstrap-t repeats the statistic as computed).

    Args:
        M: (C, k) per-cluster values, C >= 2; rng: randomness; n_draws: D.
    Returns:
        (D, k, k) draws (0 where s*_ij = 0).
    """
    M = np.asarray(M, float)
    C = M.shape[0]
    if M.ndim != 2 or C < 2:
        raise UserError(f"the wild bootstrap needs a (clusters >= 2, k) matrix, got shape {M.shape}")
    return wild_maxt_draws([(1.0, M, np.ones_like(M))], rng, n_draws) * np.sqrt((C - 1) / C)


def _maxt_core(theta, sigma, alpha: float, null: np.ndarray, stepdown: bool, focus: int | None):
    """Established ordered pairs (k, k) bool and the critical values used, per step.

    ``null``: (D, k, k) null draws of every t_ij (normal or wild calibration)."""
    theta = np.asarray(theta, float)
    sigma = np.asarray(sigma, float)
    k = theta.shape[0]
    s = _pair_scales(sigma)  # (k, k)
    gap = theta[:, None] - theta[None, :]  # (k, k) theta_i - theta_j
    pos = s > 1e-12 * max(1.0, float(np.max(np.abs(np.diagonal(sigma)))) ** 0.5)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(pos, gap / np.where(pos, s, 1.0), np.where(gap > 0, np.inf, -np.inf))  # (k, k)
    t[np.eye(k, dtype=bool)] = -np.inf
    P = ~np.eye(k, dtype=bool)
    if focus is not None:
        P &= (np.arange(k)[:, None] == focus) | (np.arange(k)[None, :] == focus)
    est = np.zeros((k, k), bool)
    crits = []
    while True:
        ii, jj = np.nonzero(P & pos)  # pairs that carry sampling noise
        if ii.size:
            c = float(np.quantile(null[:, ii, jj].max(axis=1), 1.0 - alpha))
        else:
            c = np.inf  # only noiseless pairs remain: decided by their sign alone
        crits.append(c)
        new = P & (t > c) | (P & ~pos & (gap > 0))
        if not new.any():
            break
        est |= new
        P &= ~new
        if not stepdown:
            break
    return est, crits


def _null(theta, sigma, rng, n_draws, normals, null_draws, who: str) -> tuple[np.ndarray, str]:
    if null_draws is not None:
        return np.asarray(null_draws, float), "wild"
    if normals is None:
        if rng is None:
            raise UserError(f"{who} needs rng (a numpy Generator), normals or null_draws")
        normals = maxt_normals(np.asarray(theta).shape[-1], n_draws, rng)
    return normal_null_draws(np.asarray(sigma, float), normals), "normal"


def ranksets_maxt(
    theta: np.ndarray,
    sigma: np.ndarray,
    alpha: float,
    rng: np.random.Generator | None = None,
    n_draws: int = 10_000,
    stepdown: bool = True,
    normals: np.ndarray | None = None,
    null_draws: np.ndarray | None = None,
) -> dict:
    """Simultaneous max-t rank-sets with step-down (docs/METHODS.md 7.3; Mogstad, Romano, Shaikh &
    Wilhelm).

    t_ij = (theta_i - theta_j)/s_ij; c = (1 - alpha) quantile of max_{(i,j) in P} t*_ij over null
    draws (normal: t*_ij = (Z_i - Z_j)/s_ij, Z ~ N(0, Sigma); wild: ``null_draws`` from
    :func:`wild_maxt_draws`); establish "i better than j" where t_ij > c; drop those from P and
    repeat (step-down) until nothing new; rank-set of i =
    [1 + #{j established better than i}, k - #{j established worse than i}].

    Guarantee (asymptotic, Romano-Wolf step-down): P(every model's true rank is in its rank-set,
    simultaneously) >= 1 - alpha. With the wild calibration the coverage holds at 40-60 prompts
    too (docs/REPRODUCTION.md). Tighter than Algorithm 2.

    Args:
        theta: (k,) estimates; sigma: (k, k) valid covariance of theta_hat; alpha in (0, 1).
        rng / normals: the normal calibration's draws (normals: (D, k); Z = normals L^T with
            L = V diag(sqrt(max(lambda, 0))) from eigh(Sigma)).  null_draws: (D, k, k) wild draws
            (take precedence).  n_draws: D (>= 10,000).  stepdown: False = single step.
    Returns:
        dict: lower (k,), upper (k,) ints (rank 1 = best), better (k, k) bool, critical_values
        (list, one per step), procedure, calibration ("normal" | "wild").
    """
    a = float(check_alpha(alpha))
    theta = np.asarray(theta, float)
    k = theta.shape[-1]
    null, cal = _null(theta, sigma, rng, n_draws, normals, null_draws, "ranksets_maxt")
    est, crits = _maxt_core(theta, sigma, a, null, stepdown, None)
    lower = 1 + est.sum(axis=0)  # models established better than i (column i)
    upper = k - est.sum(axis=1)  # models established worse than i (row i)
    return {
        "lower": lower.astype(int),
        "upper": upper.astype(int),
        "better": est,
        "critical_values": crits,
        "procedure": "maxt" if stepdown else "maxt-single-step",
        "calibration": cal,
    }


def ranksets_marginal(
    theta: np.ndarray,
    sigma: np.ndarray,
    alpha: float,
    rng: np.random.Generator | None = None,
    n_draws: int = 10_000,
    stepdown: bool = True,
    normals: np.ndarray | None = None,
    null_draws: np.ndarray | None = None,
) -> dict:
    """Marginal max-t rank-sets: model i's set from the procedure restricted to pairs involving i.

    Guarantee (asymptotic): for each model separately, P(its true rank is in its set) >= 1 - alpha
    (not simultaneous: use :func:`ranksets_maxt` for statements about the whole ranking).
    Same draws for every model.

    Returns:
        dict: lower (k,), upper (k,), critical_values (list of k lists), procedure "marginal",
        calibration.
    """
    a = float(check_alpha(alpha))
    theta = np.asarray(theta, float)
    k = theta.shape[-1]
    null, cal = _null(theta, sigma, rng, n_draws, normals, null_draws, "ranksets_marginal")
    lower = np.empty(k, int)
    upper = np.empty(k, int)
    crits = []
    for i in range(k):
        est, c = _maxt_core(theta, sigma, a, null, stepdown, i)
        lower[i] = 1 + est[:, i].sum()
        upper[i] = k - est[i, :].sum()
        crits.append(c)
    return {
        "lower": lower,
        "upper": upper,
        "critical_values": crits,
        "procedure": "marginal",
        "calibration": cal,
    }


def rank_sets(
    theta: np.ndarray,
    sigma: np.ndarray,
    alpha: float,
    procedure: str = "maxt",
    rng: np.random.Generator | None = None,
    n_draws: int = 10_000,
    null_draws: np.ndarray | None = None,
) -> dict:
    """Rank-sets by procedure: "maxt" (default, simultaneous, step-down), "marginal" (per model),
    "chi2" (the paper's Algorithm 2, for reproduction).

    Returns:
        dict: lower (k,), upper (k,), procedure, and for max-t the critical values and calibration.
    """
    if procedure not in PROCEDURES:
        raise UserError(f"unknown rank-set procedure {procedure!r}; allowed: {', '.join(PROCEDURES)}")
    if procedure == "chi2":
        lo, up = ranksets(theta, sigma, float(check_alpha(alpha)))
        return {"lower": lo, "upper": up, "procedure": "chi2"}
    fn = ranksets_maxt if procedure == "maxt" else ranksets_marginal
    return fn(theta, sigma, alpha, rng=rng, n_draws=n_draws, null_draws=null_draws)


def rank_column(lower: np.ndarray) -> np.ndarray:
    """A table's rank column: the lower end of each model's rank-set (1 + #models significantly
    better), so statistically tied models share a rank (docs/METHODS.md 7.2). Never a rank from point
    estimates with ties broken by name."""
    return np.asarray(lower, dtype=int).copy()
