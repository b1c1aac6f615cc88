"""Prediction-powered ranking (PPR): win-rate estimates, confidence ellipsoids and rank-sets.

Implements docs/METHODS.md section 4 (Chatzi et al., *Prediction-Powered Ranking of Large Language
Models*, NeurIPS 2024, seed 003): Algorithm 3 (one source), Algorithm 1 (PPR), Algorithm 4 (the
trace-optimal lambda), Algorithm 2 (rank-sets), and the paper's quality metrics.

Data convention (every function): comparison ``i`` shows model ``first[i]`` first and
``second[i]`` second (integer indices in ``[0, k)``); ``w[i] = 1`` iff the first is preferred,
``w2[i] = 1`` iff the second is preferred, both 0 on a tie.

Covariance. ``"delta"`` (default) is the count-normalised delta-method covariance
``Sigma = A A^T / (c c^T)`` (one source) and ``A A^T / (c_N c_N^T) + B B^T / (c_n c_n^T)`` (PPR):
theta_m is a mean over the ``c_m`` comparisons that involve ``m``, so that is its variance.
``"paper"`` is the published formula ``A A^T / n^2`` and ``A A^T / N^2 + B B^T / n^2`` (with A the
residuals of lambda * w_hat, i.e. lambda^2 times the residuals of w_hat), which is k^2/4 times too
small on a balanced design; it exists only to reproduce the paper.
"""

from __future__ import annotations

import numpy as np

from engine.errors import UserError
from engine.stats.comparisons import Comparisons, Who
from engine.stats.maxt import (  # noqa: F401  (re-exported: the rank-set procedures live in maxt.py)
    CALIBRATIONS,
    PROCEDURES,
    WILD_MAX_CLUSTERS,
    WILD_MAX_MODELS,
    check_alpha,
    cluster_totals,
    maxt_normals,
    rank_column,
    rank_sets,
    ranksets,
    ranksets_marginal,
    ranksets_maxt,
    wild_maxt_draws,
)

COVARIANCES = ("delta", "paper")


# ----------------------------------------------------------------------------- validation


def check_covariance(covariance: str) -> None:
    if covariance not in COVARIANCES:
        raise UserError(f"unknown covariance {covariance!r}; allowed: {', '.join(COVARIANCES)}")


def _as_design(first, second, w, w2, k: int):
    first = np.asarray(first, dtype=np.int64)
    second = np.asarray(second, dtype=np.int64)
    w = np.asarray(w, dtype=float)
    w2 = np.asarray(w2, dtype=float)
    n = first.shape[0]
    if not (second.shape == w.shape == w2.shape == (n,)):
        raise UserError(
            f"first, second, w, w2 must all have shape (n,); got {first.shape}, "
            f"{second.shape}, {w.shape}, {w2.shape}"
        )
    if n and (first.min() < 0 or second.min() < 0 or first.max() >= k or second.max() >= k):
        raise UserError(f"model indices must be in [0, {k})")
    if np.any(first == second):
        raise UserError("a comparison must involve two different models (first == second found)")
    if np.any((w + w2) > 1) or np.any((w != 0) & (w != 1)) or np.any((w2 != 0) & (w2 != 1)):
        raise UserError("w and w2 must be 0/1 indicators and never both 1")
    return first, second, w, w2


# ----------------------------------------------------------------------------- Algorithm 3


def comparison_counts(first: np.ndarray, second: np.ndarray, k: int) -> np.ndarray:
    """c = (M + M') 1: the number of comparisons each model takes part in.

    Args:
        first, second: (n,) model indices.
        k: number of models.
    Returns:
        (k,) float counts.
    """
    return (np.bincount(first, minlength=k) + np.bincount(second, minlength=k)).astype(float)


def one_hot(idx: np.ndarray, k: int) -> np.ndarray:
    """M: the k x n one-hot matrix of model indices (column i = e_{idx[i]})."""
    idx = np.asarray(idx, dtype=np.int64)
    M = np.zeros((k, idx.shape[0]))  # (k, n)
    M[idx, np.arange(idx.shape[0])] = 1.0
    return M


def winrate_pointestimate(first, second, w, w2, k: int) -> np.ndarray:
    """theta_hat = diag(c)^-1 (M w + M' w'): each model's strict win-rate over its comparisons.

    Unbiased for theta_m (P(m preferred over a uniformly random other model)) under uniformly
    drawn pairs. Paper: Algorithm 3, line 2 (and a, b of Algorithm 1).

    Args:
        first, second: (n,) model indices; w, w2: (n,) 0/1 preference indicators (or any reals,
            e.g. lambda * w_hat - w in Algorithm 1).
        k: number of models.
    Returns:
        (k,) estimates; raises UserError if some model has no comparison.
    """
    first = np.asarray(first, dtype=np.int64)
    second = np.asarray(second, dtype=np.int64)
    c = comparison_counts(first, second, k)
    if np.any(c == 0):
        raise UserError(f"model index(es) {np.flatnonzero(c == 0).tolist()} appear in no comparison")
    # why one-hot matmuls (not bincount): the sums then happen in the same order as the paper's
    # code, so --covariance paper reproduces its numbers bit for bit; k x n stays small.
    s = one_hot(first, k) @ np.asarray(w, float) + one_hot(second, k) @ np.asarray(w2, float)  # (k,)
    return (1.0 / c) * s  # diag(c)^-1 applied as the paper's code does (reciprocal, then product)


def winrate_residuals(first, second, w, w2, theta: np.ndarray, k: int) -> np.ndarray:
    """A = (1_k (w - M^T theta)^T) o M + (1_k (w' - M'^T theta)^T) o M' (the k x n residual matrix).

    Column i holds w_i - theta[first_i] in row first_i and w'_i - theta[second_i] in row
    second_i, zeros elsewhere. Paper: Algorithm 3 line 3, Algorithm 1 lines 7-8.

    Args:
        first, second: (n,) model indices; w, w2: (n,) outcomes; theta: (k,) centre.
    Returns:
        (k, n) dense residual matrix.
    """
    first = np.asarray(first, dtype=np.int64)
    second = np.asarray(second, dtype=np.int64)
    n = first.shape[0]
    cols = np.arange(n)
    A = np.zeros((k, n))  # (k, n); dense like the paper's code, small for k <= ~50
    A[first, cols] = np.asarray(w, float) - theta[first]
    A[second, cols] = np.asarray(w2, float) - theta[second]
    return A


def residual_covariance(A: np.ndarray, c: np.ndarray, n: int, covariance: str = "delta") -> np.ndarray:
    """Sigma_hat from a residual matrix: A A^T / (c c^T) ("delta") or A A^T / n^2 ("paper").

    The delta form is the delta-method (sandwich) covariance of a vector of per-model means with
    shared comparisons; it is consistent. The paper form under-states it by c_m c_m' / n^2.

    Args:
        A: (k, n) residuals; c: (k,) comparison counts; n: number of comparisons.
    Returns:
        (k, k) covariance.
    """
    check_covariance(covariance)
    S = A @ A.T  # (k, k)
    if covariance == "paper":
        return S / n**2
    return S / np.outer(c, c)


def cluster_sum_columns(A: np.ndarray, cluster) -> np.ndarray:
    """A G: the residual matrix's columns summed within each prompt (G = n x C membership matrix).

    Args:
        A: (k, n) residuals; cluster: (n,) prompt ids (any hashable; None entries = own cluster).
    Returns:
        (k, C) cluster-summed residuals (columns in sorted-id order).
    """
    from engine.stats.clustered import cluster_codes  # local: clustered imports winrates only

    codes, C, _ = cluster_codes(cluster, A.shape[1])
    out = np.zeros((A.shape[0], C))
    np.add.at(out.T, codes, A.T)  # (C, k) += rows of A^T
    return out


def onesource_theta_sigma(first, second, w, w2, k: int, covariance: str = "delta", cluster=None):
    """Algorithm 3: theta_hat = diag(c)^-1 (M w + M' w'), Sigma_hat = A A^T / (c c^T) (or / n^2).

    With ``cluster`` (prompt ids) the covariance is cluster-robust: A -> A G (columns summed
    within each prompt), Sigma_hat = (A G)(A G)^T / (c c^T) (docs/METHODS.md 7.3); with one comparison
    per prompt this is the formula above unchanged.

    Guarantee (delta): sqrt(n)(theta_hat - theta) -> N(0, Sigma) and Sigma_hat is consistent
    (with ``cluster``: for independent prompts, any dependence within a prompt), so the chi^2
    ellipsoid of Eq. 6 has asymptotic coverage 1 - alpha. Paper: Appendix B.1.

    Args:
        first, second: (n,) model indices; w, w2: (n,) 0/1 indicators; k: number of models.
        covariance: "delta" | "paper".  cluster: (n,) prompt ids or None (rows independent).
    Returns:
        theta (k,), sigma (k, k).
    """
    check_covariance(covariance)
    first, second, w, w2 = _as_design(first, second, w, w2, k)
    theta = winrate_pointestimate(first, second, w, w2, k)
    A = winrate_residuals(first, second, w, w2, theta, k)
    c = comparison_counts(first, second, k)
    if cluster is not None:
        if covariance != "delta":
            raise UserError("prompt-clustered covariance is only defined for covariance='delta'")
        A = cluster_sum_columns(A, cluster)
    return theta, residual_covariance(A, c, first.shape[0], covariance)


def wild_draws_onesource(
    first, second, w, w2, k: int, cluster, rng: np.random.Generator, n_draws: int = 10_000
) -> np.ndarray:
    """Wild cluster bootstrap-t null draws (D, k, k) for Algorithm 3's theta_hat
    (:func:`maxt.wild_maxt_draws`).

    ``cluster``: (n,) prompt ids, or None (each row its own cluster)."""
    from engine.stats.clustered import cluster_codes  # local: clustered imports winrates only

    first, second, w, w2 = _as_design(first, second, w, w2, k)
    codes, C, _ = cluster_codes(cluster, first.shape[0])
    return wild_maxt_draws([(1.0, *cluster_totals(first, second, w, w2, codes, C, k))], rng, n_draws)


def wild_draws_ppr(
    first_N,
    second_N,
    wh_N,
    wh2_N,
    first_n,
    second_n,
    w_n,
    w2_n,
    wh_n,
    wh2_n,
    k: int,
    lam: float,
    cluster_N,
    cluster_n,
    rng: np.random.Generator,
    n_draws: int = 10_000,
) -> np.ndarray:
    """Wild cluster bootstrap-t null draws (D, k, k) for PPR's theta_hat = lambda a - b (lambda held
    fixed).

    Prompts are matched across the two sets (one weight per prompt); without prompt ids every row
    is its own cluster."""
    from engine.stats.clustered import cluster_codes

    nN, nn = len(first_N), len(first_n)
    ids = (
        None
        if cluster_N is None
        else np.concatenate([np.asarray(cluster_N, object), np.asarray(cluster_n, object)])
    )
    codes, C, _ = cluster_codes(ids, nN + nn)
    a_src = cluster_totals(np.asarray(first_N), np.asarray(second_N), wh_N, wh2_N, codes[:nN], C, k)
    yn = lam * np.asarray(wh_n, float) - np.asarray(w_n, float)
    yn2 = lam * np.asarray(wh2_n, float) - np.asarray(w2_n, float)
    b_src = cluster_totals(np.asarray(first_n), np.asarray(second_n), yn, yn2, codes[nN:], C, k)
    return wild_maxt_draws([(lam, *a_src), (-1.0, *b_src)], rng, n_draws)


# ----------------------------------------------------------------------------- Algorithms 1, 4


def ppr_lambda(
    first_N, second_N, wh_N, wh2_N, first_n, second_n, w_n, w2_n, wh_n, wh2_n, k: int
) -> float:
    """Algorithm 4: lambda = clip( tr(Cov_n(judge, human residuals)) / ((1 + n/N) tr(Var_N(judge
    residuals))), 0, 1).

    Equal to the paper's n/(n+N) tr(A_hat_n A_n^T / n^2) / tr(A_N A_N^T / N^2); computed as
    tr(A_n A_hat_n^T / n) / ((1 + n/N) tr(A_N A_N^T / N)), the order of the authors' code.
    Paper: Appendix B.2, Algorithm 4 (its line 6 "A_n^-1" is a typo for A_n^T).

    Args:
        *_N: (N,) judge-only set; *_n: (n,) set with human (w) and judge (wh) labels.
    Returns:
        lambda in [0, 1].
    """
    n, N = len(first_n), len(first_N)
    ah = winrate_pointestimate(first_n, second_n, wh_n, wh2_n, k)
    a = winrate_pointestimate(first_n, second_n, w_n, w2_n, k)
    Ah = winrate_residuals(first_n, second_n, wh_n, wh2_n, ah, k)  # (k, n)
    Ahum = winrate_residuals(first_n, second_n, w_n, w2_n, a, k)  # (k, n)
    aN = winrate_pointestimate(first_N, second_N, wh_N, wh2_N, k)
    AN = winrate_residuals(first_N, second_N, wh_N, wh2_N, aN, k)  # (k, N)
    # per-sample covariances, in the published code's order of operations (bit-for-bit lambda)
    cov_n = (Ahum @ Ah.T) / n  # (k, k)
    var_N = (AN @ AN.T) / N**2 * N  # (k, k)
    if np.trace(var_N) <= 0:
        return 0.0  # a judge that never varies carries no information: fall back to human-only
    lam = np.trace(cov_n) / ((1 + n / N) * np.trace(var_N))
    return float(min(max(lam, 0.0), 1.0))


def ppr_theta_sigma(
    first_N,
    second_N,
    wh_N,
    wh2_N,
    first_n,
    second_n,
    w_n,
    w2_n,
    wh_n,
    wh2_n,
    k: int,
    lam: float | str = "auto",
    covariance: str = "delta",
    cluster_N=None,
    cluster_n=None,
):
    """Algorithm 1: theta_hat = a - b, a = judge win-rates (x lambda) on D_N, b = mean of lambda*w_hat -
    w on D_n.

    Sigma_hat = A A^T / (c_N c_N^T) + B B^T / (c_n c_n^T) ("delta") or A A^T / N^2 + B B^T / n^2
    ("paper"), with A the residuals of lambda*w_hat on D_N about a and B those of
    lambda*w_hat - w on D_n about b. Guarantee: theta_hat is unbiased for the human win-rates for
    any fixed lambda and any judge; with "delta" the ellipsoid is asymptotically valid.
    Paper: Section 3, Eq. 5 and 7, Algorithm 1.

    Args:
        first_N, second_N, wh_N, wh2_N: (N,) comparisons labelled by the judge only.
        first_n, second_n, w_n, w2_n, wh_n, wh2_n: (n,) comparisons labelled by humans (w) and
            the judge (wh).
        k: number of models; lam: "auto" (Algorithm 4) or a value in [0, 1].
        covariance: "delta" | "paper".
        cluster_N, cluster_n: (N,), (n,) prompt ids (both or neither; delta only). Then
            Sigma_hat = sum_c u_c u_c^T, u_c = lambda (A G_N)_c / c_N - (B G_n)_c / c_n, clusters
            matched across the two sets (a prompt in both sets correlates a and b); with distinct
            prompts per row this is the unclustered formula.
    Returns:
        theta (k,), sigma (k, k), lambda (float).
    """
    check_covariance(covariance)
    first_N, second_N, wh_N, wh2_N = _as_design(first_N, second_N, wh_N, wh2_N, k)
    first_n, second_n, w_n, w2_n = _as_design(first_n, second_n, w_n, w2_n, k)
    _, _, wh_n, wh2_n = _as_design(first_n, second_n, wh_n, wh2_n, k)
    n, N = first_n.shape[0], first_N.shape[0]
    if n == 0 or N == 0:
        raise UserError(f"PPR needs both human-labelled and judge-only comparisons; got n={n}, N={N}")
    if isinstance(lam, str):
        if lam != "auto":
            raise UserError(f"lambda must be 'auto' or a number in [0, 1]; got {lam!r}")
        lam = ppr_lambda(first_N, second_N, wh_N, wh2_N, first_n, second_n, w_n, w2_n, wh_n, wh2_n, k)
    lam = float(lam)
    if not 0.0 <= lam <= 1.0:
        raise UserError(f"lambda must be in [0, 1]; got {lam!r}")
    # 1. a: judge win-rates on D_N (Eq. 5, first term, before the factor lambda)
    a = winrate_pointestimate(first_N, second_N, wh_N, wh2_N, k)  # (k,)
    # 2. b: the rectifier, mean of lambda*w_hat - w on D_n (Eq. 5, second term)
    yn, yn2 = lam * wh_n - w_n, lam * wh2_n - w2_n  # (n,)
    b = winrate_pointestimate(first_n, second_n, yn, yn2, k)  # (k,)
    theta = lam * a - b
    # 3. residuals and the covariance (Eq. 7, or its count-normalised correction). lambda is
    #    applied outside (lambda^2 A A^T), as in the authors' code: same value as residuals of
    #    lambda*w_hat, and bit-for-bit equal to the published numbers with "paper".
    A = winrate_residuals(first_N, second_N, wh_N, wh2_N, a, k)  # (k, N)
    B = winrate_residuals(first_n, second_n, yn, yn2, b, k)  # (k, n)
    cN, cn = comparison_counts(first_N, second_N, k), comparison_counts(first_n, second_n, k)
    if (cluster_N is None) != (cluster_n is None):
        raise UserError(
            "give prompt ids for both the judge-only and the human-labelled comparisons, or for neither"
        )
    if cluster_N is not None:
        if covariance != "delta":
            raise UserError("prompt-clustered covariance is only defined for covariance='delta'")
        ids = np.concatenate([np.asarray(cluster_N, dtype=object), np.asarray(cluster_n, dtype=object)])
        U = np.concatenate([lam * A / cN[:, None], -B / cn[:, None]], axis=1)  # (k, N + n)
        UG = cluster_sum_columns(U, ids)  # (k, C)
        return theta, UG @ UG.T, lam
    sigma = lam**2 * residual_covariance(A, cN, N, covariance) + residual_covariance(
        B, cn, n, covariance
    )
    return theta, sigma, lam


def true_ranksets(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rank-sets induced by known theta: l = 1 + #{theta_j > theta_m}, u = k - #{theta_j < theta_m}.

    Args:
        theta: (..., k) true win-rates.
    Returns:
        lower, upper: (..., k) ints (equal for models with unique values).
    """
    theta = np.asarray(theta, float)
    k = theta.shape[-1]
    gap = theta[..., :, None] - theta[..., None, :]
    return (1 + np.sum(gap < 0, axis=-1)).astype(int), (k - np.sum(gap > 0, axis=-1)).astype(int)


# ----------------------------------------------------------------------------- quality metrics


def rankset_size(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Average rank-set size, mean_m (u(m) - l(m) + 1).

    Args:
        lower, upper: (..., k).
    Returns:
        (...) mean sizes.
    """
    return np.mean(np.asarray(upper) - np.asarray(lower) + 1, axis=-1)


def rankset_covers(lower, upper, ref_lower, ref_upper) -> np.ndarray:
    """1{for all m: [ref_l(m), ref_u(m)] is a subset of [l(m), u(m)]} (coverage / baseline coverage).

    Args:
        lower, upper: (..., k) estimated rank-sets; ref_lower, ref_upper: (..., k) reference
            (true or BASELINE) rank-sets, broadcastable.
    Returns:
        (...) booleans; their mean over draws is the (baseline) coverage probability.
    """
    return np.all((np.asarray(lower) <= ref_lower) & (np.asarray(upper) >= ref_upper), axis=-1)


def rankset_intersects(lower, upper, ref_lower, ref_upper) -> np.ndarray:
    """1{for all m: [ref_l(m), ref_u(m)] and [l(m), u(m)] intersect} (baseline intersection).

    Args:
        lower, upper, ref_lower, ref_upper: (..., k), broadcastable.
    Returns:
        (...) booleans; their mean over draws is the baseline intersection probability.
    """
    return np.all((np.asarray(lower) <= ref_upper) & (np.asarray(upper) >= ref_lower), axis=-1)


def rank_position_probabilities(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """P_hat(rank position r lies in model m's rank-set) over draws (paper Fig. 9 dot plot).

    Args:
        lower, upper: (R, k) rank-sets of R draws.
    Returns:
        (k, k) matrix P[m, r-1].
    """
    lower = np.asarray(lower)
    upper = np.asarray(upper)
    k = lower.shape[-1]
    r = np.arange(1, k + 1)
    inside = (lower[..., None] <= r) & (upper[..., None] >= r)  # (R, k, k)
    return inside.mean(axis=0)


def rankset_distribution(lower: np.ndarray, upper: np.ndarray) -> list[dict[tuple[int, int], float]]:
    """P_hat(rank-set of model m = [l, u]) over draws (paper Fig. 10), per model.

    Args:
        lower, upper: (R, k) rank-sets of R draws.
    Returns:
        k dicts {(l, u): frequency}, most frequent first.
    """
    lower = np.asarray(lower)
    upper = np.asarray(upper)
    R_, k = lower.shape
    out = []
    for m in range(k):
        sets, counts = np.unique(
            np.stack([lower[:, m], upper[:, m]], axis=1), axis=0, return_counts=True
        )
        order = np.argsort(-counts, kind="stable")
        out.append({(int(sets[i, 0]), int(sets[i, 1])): float(counts[i] / R_) for i in order})
    return out


def rbo(true_order: np.ndarray, est_order: np.ndarray, p: float = 0.6) -> float:
    """RBO = (1 - p) sum_{i=1..k} p^(i-1) |T_{:i} n T_hat_{:i}| / i (rank-biased overlap, truncated at
    k).

    Paper: Appendix E (Webber et al. 2010). 1 - p^k for identical orders.

    Args:
        true_order, est_order: (k,) model indices, best first.
        p: persistence in [0, 1].
    Returns:
        RBO value.
    """
    t = np.asarray(true_order)
    e = np.asarray(est_order)
    k = t.shape[0]
    # |T_:i n T_hat_:i| for every depth at once: position of each model in both orders
    pos_t = np.empty(k, int)
    pos_t[t] = np.arange(k)
    pos_e = np.empty(k, int)
    pos_e[e] = np.arange(k)
    depth_in_both = np.maximum(
        pos_t, pos_e
    )  # (k,): first depth (0-based) where the model is in both tops
    overlap = np.cumsum(np.bincount(depth_in_both, minlength=k))  # (k,) |overlap| at depth i+1
    i = np.arange(1, k + 1)
    return float((1 - p) * np.sum(p ** (i - 1) * overlap / i))


# ----------------------------------------------------------------------------- synthetic data (Appendix
#   E)


def balanced_design(k: int, per_ordered_pair: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (a, b), a != b, repeated ``per_ordered_pair`` times, in blocks.

    So every pair has the same count and every model is first and second equally often
    (Appendix E). Block p holds rows p*R .. (p+1)*R - 1.

    Returns:
        first, second: (k (k-1) R,) model indices.
    """
    a, b = np.nonzero(~np.eye(k, dtype=bool))  # (k(k-1),) ordered pairs
    return np.repeat(a, per_ordered_pair), np.repeat(b, per_ordered_pair)


def synthetic_theta(k: int, u: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """True theta ~ Uniform(0, 1/2)^k (distinct) and a judge theta = clip(theta + Uniform(-u, u), 0,
    1/2).

    The paper "re-normalises" the judge's vector; we clip it to [0, 1/2], the range in which the
    simulation rule P(first wins) = 2 theta is a probability. Appendix E.

    Returns:
        theta (k,), theta_judge (k,).
    """
    theta = rng.uniform(0.0, 0.5, size=k)
    judge = np.clip(theta + rng.uniform(-u, u, size=k), 0.0, 0.5)
    return theta, judge


def synthetic_outcomes(
    first: np.ndarray, theta: np.ndarray, theta_judge: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Appendix E outcomes: one x ~ U(0,1) per comparison;
    w = 1{x < 2 theta[first]}, w_hat = 1{x < 2 theta_judge[first]}; w' = w_hat' = 0.

    The shared x makes human and judge agree except where their thetas differ, like a real
    aligned judge. E[theta_hat_m] = theta_m on a design where m is first in half its comparisons.

    Returns:
        w (n,), w_hat (n,) as floats.
    """
    x = rng.random(first.shape[0])  # (n,)
    return (x < 2 * theta[first]).astype(float), (x < 2 * theta_judge[first]).astype(float)


def onesource_of(c: Comparisons, who: Who, covariance: str = "delta"):
    """:func:`onesource_theta_sigma` of the rows of ``c`` labelled by ``who`` ('human' | 'judge'),
    clustered by ``c``'s prompts when it has them (the one comparison type, engine.stats.comparisons)."""
    s = c.subset(c.labelled(who))
    return onesource_theta_sigma(
        s.first, s.second, *s.indicators(who), s.k, covariance, cluster=s.cluster
    )
