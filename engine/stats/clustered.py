"""Prompt-clustered inference for pairwise comparisons (METHODS.md section 7.2).

One prompt yields many comparison rows (model pairs, both presentation orders, repeats, both
noise modes), so rows are not independent: every interval here treats the prompt as the unit of
independence (a *cluster*). Rows without a prompt id are each their own cluster; every result
says which (``per_row_clusters``).

Data convention (as :mod:`engine.stats.winrates`): row ``r`` compares model ``a[r]`` (shown
first) with ``b[r]`` (indices in ``[0, k)``), ``outcome[r]`` in {0 a wins, 1 b wins, 2 tie};
``cluster[r]`` is any hashable prompt id (or None for all rows).

Family:

* :func:`cluster_codes`                 factorise prompt ids -> (n,) codes, C, per_row flag
* :func:`cluster_multiplicities`        (B, C) counts of each cluster in each bootstrap resample
* :func:`cluster_pair_counts`           per-cluster win/tie counts as a sparse (C, 2k²) matrix
* :func:`resampled_pair_counts`         wins (B, k, k), ties (B, k, k) for all resamples at once
* :func:`davidson_fit_counts`           batched Bradley–Terry/Davidson MM on (B, k, k) counts
* :func:`elo_ratings_weighted`          online Elo for B row-weightings in one pass over rows
* :func:`winrate_cluster_bootstrap`     pairwise + average win-rates, percentile CIs
* :func:`davidson_cluster_bootstrap`    BT/Davidson log-strengths, percentile CIs
* :func:`elo_cluster_bootstrap`         Elo ratings, percentile CIs
* :func:`winrate_cluster_se`            cluster-robust (sandwich) SE of every pairwise win-rate
* :func:`mode_diff_paired_test`         coupled − independent win-rate per pair, t test paired by prompt
* :func:`position_bias`                 order-flip rate and first-position win share (both orders judged)
* :func:`holm_adjust`                   Holm step-down adjusted p-values
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy import sparse, stats

from engine.errors import UserError
from engine.stats.comparisons import Comparisons, Who
from engine.stats.winrates import A_WINS, B_WINS, TIE, _check

DEFAULT_RESAMPLES = 1000


# ----------------------------------------------------------------------------- clusters and resamples

def cluster_codes(cluster, n: int) -> tuple[np.ndarray, int, bool]:
    """Factorise prompt ids into codes 0..C−1; None (or all-missing) -> each row its own cluster.

    Args:
        cluster: (n,) prompt ids (ints or strings; None/NaN entries are each their own cluster)
            or None.  n: number of rows.
    Returns:
        codes (n,) int64, C (number of clusters), per_row_clusters (True when no ids were given).
    """
    if cluster is None:
        return np.arange(n, dtype=np.int64), int(n), True
    arr = np.asarray(cluster, dtype=object)
    if arr.shape != (n,):
        raise UserError(f"cluster ids must have shape ({n},), got {arr.shape}")
    missing = np.array([v is None or (isinstance(v, float) and v != v) for v in arr.tolist()], bool)
    if missing.all():
        return np.arange(n, dtype=np.int64), int(n), True
    keys = arr.astype(str)
    keys[missing] = np.char.add("\x00row", np.arange(n).astype(str))[missing]  # unique per missing row
    _, codes = np.unique(keys, return_inverse=True)
    return codes.astype(np.int64), int(codes.max()) + 1, False


def cluster_multiplicities(C: int, n_resamples: int, rng: np.random.Generator, chunk: int = 100) -> np.ndarray:
    """How often each cluster is drawn in each resample: m_b = counts of C draws with replacement.

    m_b ~ Multinomial(C, 1/C each), drawn as C uniform cluster indices per resample
    (rng.integers) counted with one bincount per chunk of resamples (faster than
    rng.multinomial for large C). Weighting every row of cluster c by m_bc is the same as
    keeping all rows of the drawn clusters.

    Returns:
        (B, C) int32, rows summing to C.
    """
    if C < 1 or n_resamples < 1:
        raise UserError(f"need at least one cluster and one resample, got C={C}, B={n_resamples}")
    out = np.empty((n_resamples, C), np.int32)
    for s in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - s)
        idx = rng.integers(0, C, size=(m, C))  # (m, C) drawn cluster ids
        flat = (np.arange(m)[:, None] * C + idx).ravel()
        out[s:s + m] = np.bincount(flat, minlength=m * C).reshape(m, C)
    return out


def cluster_pair_counts(a, b, outcome, codes: np.ndarray, C: int, k: int) -> sparse.csr_matrix:
    """X[c, i·k + j] = #{rows of cluster c where i beat j};  X[c, k² + i·k + j] = #{ties of i, j}, i < j.

    Returns:
        (C, 2k²) sparse count matrix.
    """
    a, b, outcome = _check(a, b, outcome, k)
    winner = np.where(outcome == A_WINS, a, b)
    loser = np.where(outcome == A_WINS, b, a)
    cell = np.where(outcome == TIE, k * k + np.minimum(a, b) * k + np.maximum(a, b), winner * k + loser)
    X = sparse.coo_matrix((np.ones(a.size, np.int32), (codes, cell)), shape=(C, 2 * k * k))
    return X.tocsr()  # integer counts: the product with the integer multiplicities stays exact and fast


def _split_counts(flat: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, 2k²) -> wins (B, k, k), ties (B, k, k) symmetric."""
    B = flat.shape[0]
    wins = flat[:, :k * k].reshape(B, k, k)
    ties = flat[:, k * k:].reshape(B, k, k)
    return wins, ties + ties.transpose(0, 2, 1)


def resampled_pair_counts(X: sparse.csr_matrix, mult: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Win and tie counts of every resample in one sparse product: counts_b = m_b X.

    Args:
        X: (C, 2k²) from :func:`cluster_pair_counts`.  mult: (B, C) multiplicities.
    Returns:
        wins (B, k, k), ties (B, k, k) float arrays.
    """
    flat = np.asarray(X.T.tocsr() @ mult.T).T.astype(np.float64)  # (B, 2k²), integer product
    return _split_counts(flat, k)


def _percentile(draws: np.ndarray, conf: float) -> tuple[np.ndarray, np.ndarray]:
    tail = (1 - conf) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices (pairs never compared)
        return np.nanquantile(draws, tail, axis=0), np.nanquantile(draws, 1 - tail, axis=0)


def _check_conf(conf: float, n_resamples: int) -> None:
    if not 0 < conf < 1:
        raise UserError(f"confidence level must be in (0, 1), got {conf}")
    if n_resamples < 1:
        raise UserError(f"n_resamples must be >= 1, got {n_resamples}")


# ----------------------------------------------------------------------------- win-rates

def _rates(wins: np.ndarray, ties: np.ndarray):
    """W = wins / n, T = ties / n, avg = nanmean over opponents; NaN where a pair has no rows."""
    n = wins + wins.swapaxes(-1, -2) + ties
    with np.errstate(invalid="ignore", divide="ignore"):
        W = np.where(n > 0, wins / np.where(n > 0, n, 1), np.nan)
        T = np.where(n > 0, ties / np.where(n > 0, n, 1), np.nan)
    k = W.shape[-1]
    eye = np.eye(k, dtype=bool)
    W = np.where(eye, np.nan, W)
    T = np.where(eye, np.nan, T)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        avg = np.nanmean(W, axis=-1)
    return W, T, n, avg


def winrate_cluster_bootstrap(a, b, outcome, k: int, rng: np.random.Generator, cluster=None,
                              n_resamples: int = DEFAULT_RESAMPLES, conf: float = 0.95) -> dict:
    """Pairwise and average win-rates with cluster-bootstrap percentile intervals.

    W_ij = #{i beat j}/#{i vs j};  avg_i = mean_{j: n_ij>0} W_ij;  W*_b from the rows of C prompts
    drawn with replacement (all rows of a prompt kept); CI = (1−conf)/2, (1+conf)/2 percentiles.

    Guarantee: asymptotically (C → ∞) valid for independent prompts, whatever the dependence of
    the rows within a prompt (pairs, orders, repeats, modes). Coverage in the clustered judge
    design: docs/REPRODUCTION.md. Paper: Benz et al. Table 1 / Fig. 3 quantities, with the
    clustering of METHODS.md 7.2 (the paper's Wilson intervals treat rows as independent).

    Args:
        a, b, outcome: (n,) comparisons; k: models; rng: randomness; cluster: (n,) prompt ids or
            None (each row its own cluster); n_resamples: B (>= 1000 recommended); conf: level.
    Returns:
        dict: W, T, n (k, k); W_low, W_high (k, k); avg, avg_low, avg_high (k,);
        W_draws (B, k, k), avg_draws (B, k); n_clusters, per_row_clusters, n_resamples, conf.
    """
    _check_conf(conf, n_resamples)
    a, b, outcome = _check(a, b, outcome, k)
    codes, C, per_row = cluster_codes(cluster, a.size)
    X = cluster_pair_counts(a, b, outcome, codes, C, k)
    wins, ties = _split_counts(np.asarray(X.sum(axis=0), dtype=np.float64), k)
    W, T, n, avg = _rates(wins[0], ties[0])
    mult = cluster_multiplicities(C, n_resamples, rng)  # (B, C)
    wb, tb = resampled_pair_counts(X, mult, k)
    Wb, _, nb, _ = _rates(wb, tb)  # (B, k, k)
    # average over the opponents compared in the full data (a resample that lost a pair: NaN-mean of the rest)
    has = n > 0
    Wb_avg = np.where(has[None], Wb, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        avg_b = np.nanmean(Wb_avg, axis=-1)  # (B, k)
    W_lo, W_hi = _percentile(Wb, conf)
    a_lo, a_hi = _percentile(avg_b, conf)
    return {"W": W, "T": T, "n": n.astype(np.int64), "W_low": W_lo, "W_high": W_hi,
            "avg": avg, "avg_low": a_lo, "avg_high": a_hi, "W_draws": Wb, "avg_draws": avg_b,
            "n_clusters": C, "per_row_clusters": per_row, "n_resamples": int(n_resamples), "conf": conf}


def winrate_cluster_se(a, b, outcome, k: int, cluster=None, conf: float = 0.95,
                       small_sample: bool = True) -> dict:
    """Cluster-robust (sandwich) SE and Wald CI of every pairwise win-rate.

    SE_ij = sqrt(Σ_c (Σ_{rows r of pair ij in c} (y_r − Ŵ_ij))²) / N_ij,  y_r = 1{i won row r};
    with ``small_sample`` the CR1 factor sqrt(C_ij/(C_ij − 1)) (C_ij = prompts with that pair).

    Guarantee: consistent for the SE of Ŵ_ij with independent prompts (any within-prompt
    dependence); the Wald interval is asymptotic (prefer the bootstrap near 0 or 1).

    Args:
        a, b, outcome: (n,); k; cluster: (n,) ids or None; conf; small_sample.
    Returns:
        dict: W (k, k), se (k, k), low, high (k, k), n (k, k), n_clusters_pair (k, k),
        n_clusters, per_row_clusters.
    """
    a, b, outcome = _check(a, b, outcome, k)
    codes, C, per_row = cluster_codes(cluster, a.size)
    X = cluster_pair_counts(a, b, outcome, codes, C, k).tocsc()  # (C, 2k²)
    kk = k * k
    # S maps the 2k² count cells to the k² ordered-pair totals n_ij = wins_ij + wins_ji + ties_{min,max}
    i, j = np.divmod(np.arange(kk), k)
    rows = np.concatenate([i * k + j, j * k + i, kk + np.minimum(i, j) * k + np.maximum(i, j)])
    cols = np.tile(np.arange(kk), 3)
    keep = np.tile(i != j, 3)
    S = sparse.csc_matrix((np.ones(keep.sum()), (rows[keep], cols[keep])), shape=(2 * kk, kk))
    Nc = (X @ S).tocsc()  # (C, k²) rows of pair ij in cluster c
    Wc = X[:, :kk]  # (C, k²) wins of i over j in cluster c
    N: np.ndarray = np.asarray(Nc.sum(axis=0)).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        Wv = np.where(N > 0, np.asarray(Wc.sum(axis=0)).ravel() / np.where(N > 0, N, 1), np.nan)
    # Σ_c (w_c − Ŵ n_c)² = Σ w_c² − 2Ŵ Σ w_c n_c + Ŵ² Σ n_c²   (sparse column sums)
    sww = np.asarray(Wc.multiply(Wc).sum(axis=0)).ravel()
    swn = np.asarray(Wc.multiply(Nc).sum(axis=0)).ravel()
    snn = np.asarray(Nc.multiply(Nc).sum(axis=0)).ravel()
    W0 = np.nan_to_num(Wv)
    meat = np.maximum(sww - 2 * W0 * swn + W0 ** 2 * snn, 0.0).reshape(k, k)
    Cij = np.asarray((Nc > 0).sum(axis=0)).ravel().reshape(k, k)
    N = N.reshape(k, k)
    W = Wv.reshape(k, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.where(Cij > 1, Cij / np.maximum(Cij - 1, 1), np.nan) if small_sample else 1.0
        se = np.sqrt(meat * corr) / N
    W = np.where(np.eye(k, dtype=bool), np.nan, W)
    z = stats.norm.ppf(0.5 + conf / 2)
    return {"W": W, "se": se, "low": W - z * se, "high": W + z * se, "n": N.astype(np.int64),
            "n_clusters_pair": Cij, "n_clusters": C, "per_row_clusters": per_row}


# ----------------------------------------------------------------------------- Bradley-Terry / Davidson, batched

def davidson_fit_counts(wins, ties, max_iter: int = 5_000, tol: float = 1e-9, init=None) -> tuple[Any, Any]:
    """Bradley–Terry with Davidson ties for a batch of count matrices, by MM (Hunter 2004).

    P(i > j) = π_i/D, P(tie) = ν sqrt(π_i π_j)/D, D = π_i + π_j + ν sqrt(π_i π_j);
    π_i ← (2W_i + T_i) / Σ_j n_ij (2 + ν sqrt(π_j/π_i)) / D_ij;  ν ← T / Σ_{i<j} n_ij sqrt(π_i π_j)/D_ij.
    The same iteration as :func:`engine.stats.winrates.davidson_fit`, run on all B problems at
    once (only unconverged ones keep iterating). β = log π with mean 0; a model that never wins
    nor ties is floored at π = 1e-12.

    Args:
        wins: (B, k, k) or (k, k), wins[b, i, j] = #{i beat j};  ties: same shape, symmetric.
        init: optional (B, k) or (k,) starting β (warm start, e.g. the full-data fit).
    Returns:
        beta (B, k) (or (k,)), nu (B,) (or scalar).
    """
    wins = np.asarray(wins, float)
    ties = np.asarray(ties, float)
    single = wins.ndim == 2
    if single:
        wins, ties = wins[None], ties[None]
    B, k, _ = wins.shape
    n = wins + wins.transpose(0, 2, 1) + ties  # (B, k, k)
    score = 2 * wins.sum(axis=2) + ties.sum(axis=2)  # (B, k)
    Ttot = ties.sum(axis=(1, 2)) / 2  # (B,)
    pi = np.ones((B, k)) if init is None else np.exp(np.broadcast_to(np.asarray(init, float), (B, k))).copy()
    nu = np.where(Ttot > 0, 1.0, 0.0)
    active = np.arange(B)
    for _ in range(max_iter):
        p, v, nn, sc, Tt = pi[active], nu[active], n[active], score[active], Ttot[active]
        s = np.sqrt(p[:, :, None] * p[:, None, :])  # (b, k, k)
        D = p[:, :, None] + p[:, None, :] + v[:, None, None] * s
        ratio = np.sqrt(p[:, None, :] / p[:, :, None])  # sqrt(π_j/π_i)
        den = (nn * (2 + v[:, None, None] * ratio) / D).sum(axis=2)  # (b, k)
        new = np.where(den > 0, sc / np.where(den > 0, den, 1.0), p)
        new = np.maximum(new, 1e-12)
        new /= np.exp(np.log(new).mean(axis=1, keepdims=True))  # geometric mean 1
        s = np.sqrt(new[:, :, None] * new[:, None, :])
        D = new[:, :, None] + new[:, None, :] + v[:, None, None] * s
        with np.errstate(invalid="ignore", divide="ignore"):
            nv = np.where(Tt > 0, Tt / ((nn * s / D).sum(axis=(1, 2)) / 2), 0.0)
        done = (np.max(np.abs(np.log(new) - np.log(p)), axis=1) < tol) & (np.abs(nv - v) < tol)
        pi[active], nu[active] = new, nv
        active = active[~done]
        if active.size == 0:
            break
    beta = np.log(pi)
    beta -= beta.mean(axis=1, keepdims=True)
    return (beta[0], float(nu[0])) if single else (beta, nu)


def davidson_cluster_bootstrap(a, b, outcome, k: int, rng: np.random.Generator, cluster=None,
                               n_resamples: int = DEFAULT_RESAMPLES, conf: float = 0.95) -> dict:
    """BT/Davidson log-strengths with cluster-bootstrap percentile intervals (vectorised).

    β̂ = argmax Davidson likelihood; β*_b = the fit on resample b's counts m_b X (one sparse
    product for all b), all B fits by batched MM warm-started at β̂.

    Guarantee: asymptotically valid for the (pseudo-true) Davidson parameters with independent
    prompts; percentile intervals per model, not simultaneous.

    Returns:
        dict: beta (k,), nu, beta_low, beta_high (k,), nu_low, nu_high, draws (B, k),
        nu_draws (B,), n_clusters, per_row_clusters, n_resamples, conf.
    """
    _check_conf(conf, n_resamples)
    a, b, outcome = _check(a, b, outcome, k)
    codes, C, per_row = cluster_codes(cluster, a.size)
    X = cluster_pair_counts(a, b, outcome, codes, C, k)
    wins, ties = _split_counts(np.asarray(X.sum(axis=0), dtype=np.float64), k)
    beta, nu = davidson_fit_counts(wins[0], ties[0])
    mult = cluster_multiplicities(C, n_resamples, rng)
    wb, tb = resampled_pair_counts(X, mult, k)
    draws, nu_b = davidson_fit_counts(wb, tb, init=beta)
    lo, hi = _percentile(draws, conf)
    nlo, nhi = _percentile(nu_b, conf)
    return {"beta": beta, "nu": nu, "beta_low": lo, "beta_high": hi, "nu_low": float(nlo), "nu_high": float(nhi),
            "draws": draws, "nu_draws": nu_b, "n_clusters": C, "per_row_clusters": per_row,
            "n_resamples": int(n_resamples), "conf": conf}


# ----------------------------------------------------------------------------- Elo, batched

def elo_ratings_weighted(a, b, outcome, k: int, weights, K: float = 4.0, scale: float = 400.0,
                         base: float = 10.0, init: float = 1000.0) -> np.ndarray:
    """Online Elo for B integer row-weightings at once: row r is applied weights[b, r] times in a row.

    For each row in the given order and each repetition t < weights[b, r]:
    r_a += K (S_a − E_a), r_b −= K (S_a − E_a), E_a = 1/(1 + base^((r_b − r_a)/scale)).
    This is exactly :func:`engine.stats.winrates.elo_ratings` on the sequence where every row is
    repeated in place weights[b, r] times (a cluster-bootstrap resample keeps the original row
    order and repeats a prompt's rows as often as the prompt was drawn). One Python pass over
    the rows, numpy over the B resamples.

    Args:
        a, b, outcome: (n,) comparisons in time order; k; weights: (B, n) non-negative ints.
    Returns:
        (B, k) ratings.
    """
    a, b, outcome = _check(a, b, outcome, k)
    weights = np.asarray(weights)
    if weights.ndim != 2 or weights.shape[1] != a.size:
        raise UserError(f"weights must be (B, {a.size}), got {weights.shape}")
    if weights.dtype.kind not in "iu":
        if not np.all(weights == np.round(weights)):
            raise UserError("Elo row weights must be non-negative integers (repetition counts)")
        weights = weights.astype(np.int64)
    if weights.size and weights.min() < 0:
        raise UserError("Elo row weights must be non-negative integers (repetition counts)")
    Bn = weights.shape[0]
    r = np.full((k, Bn), float(init))  # (k, B): one row per model, contiguous over resamples
    s_a = np.where(outcome == A_WINS, 1.0, np.where(outcome == B_WINS, 0.0, 0.5))
    wT = np.ascontiguousarray(weights.T)  # (n, B)
    wmax = wT.max(axis=1)  # (n,)
    c = np.log(base) / scale
    e = np.empty(Bn)  # buffers: the loop body allocates nothing
    on = np.empty(Bn)
    for row in range(a.size):
        m = int(wmax[row])
        if m == 0:
            continue
        i, j, s = a[row], b[row], s_a[row]
        ri, rj, w = r[i], r[j], wT[row]  # views into r
        # first application, all resamples at once (weight 0 -> no update)
        np.subtract(rj, ri, out=e)
        e *= c
        np.exp(e, out=e)
        e += 1.0
        np.divide(K, e, out=e)  # K E_a
        np.subtract(K * s, e, out=e)  # K (S_a − E_a)
        np.greater(w, 0, out=on, casting="unsafe")
        e *= on
        ri += e
        rj -= e
        # repeated applications: only the few resamples that drew this row's prompt 2+ times
        if m > 1:
            sub = np.flatnonzero(w > 1)
            ws = w[sub]
            for t in range(1, m):
                sub = sub[ws > t]
                ws = ws[ws > t]
                step = K * (s - 1.0 / (1.0 + np.exp(c * (rj[sub] - ri[sub]))))
                ri[sub] += step
                rj[sub] -= step
    return r.T.copy()


def elo_cluster_bootstrap(a, b, outcome, k: int, rng: np.random.Generator, cluster=None,
                          n_resamples: int = DEFAULT_RESAMPLES, conf: float = 0.95, K: float = 4.0) -> dict:
    """Online Elo (rows in the given order) with cluster-bootstrap percentile intervals.

    r̂ = Elo over the rows in order; r*_b = Elo over the same order with each row repeated
    m_{b, c(row)} times (:func:`elo_ratings_weighted`), m_b the cluster multiplicities.

    Guarantee: Elo is an order-dependent online statistic (its value fluctuates with the last
    rows); the interval is for the rating that statistic targets (the fixed point of the
    expected update, a logistic BT on the Elo scale) and is asymptotically valid only as far as
    Elo's own fluctuation (∝ K) is small; see the coverage measured in docs/REPRODUCTION.md.
    Prefer BT/Davidson for inference.

    Returns:
        dict: elo (k,), low, high (k,), draws (B, k), n_clusters, per_row_clusters, n_resamples, conf, K.
    """
    _check_conf(conf, n_resamples)
    a, b, outcome = _check(a, b, outcome, k)
    codes, C, per_row = cluster_codes(cluster, a.size)
    mult = cluster_multiplicities(C, n_resamples, rng)  # (B, C)
    point = elo_ratings_weighted(a, b, outcome, k, np.ones((1, a.size), np.int64), K=K)[0]
    small = np.uint8 if mult.max() < 256 else np.int32  # (B, n) repetition counts, kept small in memory
    draws = elo_ratings_weighted(a, b, outcome, k, mult.astype(small)[:, codes], K=K)  # (B, k)
    lo, hi = _percentile(draws, conf)
    return {"elo": point, "low": lo, "high": hi, "draws": draws, "n_clusters": C,
            "per_row_clusters": per_row, "n_resamples": int(n_resamples), "conf": conf, "K": K}


def elo_fixed_point(W: np.ndarray, T: np.ndarray, n: np.ndarray, scale: float = 400.0, base: float = 10.0,
                    init: float = 1000.0, max_iter: int = 10_000, tol: float = 1e-10) -> np.ndarray:
    """The ratings where Elo's expected update vanishes: Σ_j n_ij (W_ij + T_ij/2 − E(r_i − r_j)) = 0, mean = init.

    (A logistic Bradley–Terry fit with ties as half wins, on the Elo scale.) The target of the
    online Elo statistic for small K; used as the truth in simulations.

    Args:
        W, T, n: (k, k) win / tie probabilities and pair weights (diagonal ignored).
    Returns:
        (k,) ratings with mean ``init``.
    """
    k = W.shape[0]
    off = ~np.eye(k, dtype=bool)
    S = np.where(off, np.nan_to_num(W) + np.nan_to_num(T) / 2, 0.0)
    nn = np.where(off, n, 0.0)
    c = np.log(base) / scale
    r = np.zeros(k)
    for _ in range(max_iter):  # Newton on the concave logistic likelihood
        E = 1 / (1 + np.exp(-c * (r[:, None] - r[None, :])))
        g = (nn * (S - E)).sum(axis=1) * c
        Hw = nn * E * (1 - E) * c * c
        H = -np.diag(Hw.sum(axis=1)) + Hw
        H[0], g[0] = 0.0, 0.0
        H[0, 0] = 1.0  # pin r_0 (identification), recentre after
        step = np.linalg.solve(H, g)
        r = r - step
        if np.max(np.abs(step)) < tol:
            break
    return r - r.mean() + init


# ----------------------------------------------------------------------------- paired-by-prompt tests

def mode_diff_paired_test(a, b, outcome, mode, cluster, k: int, conf: float = 0.95) -> dict:
    """Coupled − independent win-rate of every pair, a t test paired by prompt (METHODS.md 7.2).

    For pair (i, j) and prompt c with rows in both modes: d_c = W^{coupled}_{ij,c} − W^{indep}_{ij,c}
    (per-prompt win fractions of i over j);  Δ̂_ij = mean_c d_c,  SE = sd(d_c)/sqrt(C_ij),
    t = Δ̂/SE ~ t_{C_ij − 1};  CI = Δ̂ ± t_{C−1, (1+conf)/2} SE.  Holm-adjusted p over the pairs.

    Guarantee: valid (asymptotically; exact for normal d_c) for independent prompts, whatever the
    dependence between the two modes and among a prompt's rows. Δ̂ equals the difference of the
    pooled win-rates when every prompt has the same rows per pair and mode (the product's design).
    A two-proportion z test treats the modes as independent samples and is not valid here.

    Args:
        a, b, outcome: (n,); mode: (n,) 0 = coupled, 1 = independent; cluster: (n,) prompt ids
            (required: without prompts there is no pairing); k; conf.
    Returns:
        dict of (k, k) arrays (NaN diagonal): diff, se, t, p_value, p_holm (Holm over all
        k(k−1) off-diagonal cells), low, high, n_prompts; and n_clusters.
    """
    a, b, outcome = _check(a, b, outcome, k)
    mode = np.asarray(mode, np.int64)
    if mode.shape != a.shape or np.any((mode != 0) & (mode != 1)):
        raise UserError("mode must be an (n,) array of 0 (coupled) and 1 (independent)")
    if cluster is None:
        raise UserError("the coupled-vs-independent test is paired by prompt: prompt ids are required")
    codes, C, _ = cluster_codes(cluster, a.size)
    frac = []
    for m in (0, 1):
        sel = mode == m
        X = cluster_pair_counts(a[sel], b[sel], outcome[sel], codes[sel], C, k).toarray()  # (C, 2k²)
        w, t = _split_counts(X, k)  # (C, k, k)
        nn = w + w.transpose(0, 2, 1) + t
        with np.errstate(invalid="ignore", divide="ignore"):
            frac.append(np.where(nn > 0, w / np.where(nn > 0, nn, 1), np.nan))
    d = frac[0] - frac[1]  # (C, k, k), NaN where a prompt lacks the pair in a mode
    ok = ~np.isnan(d)
    Cij = ok.sum(axis=0)
    dz = np.where(ok, d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = dz.sum(axis=0) / Cij
        var = (np.where(ok, d - mean, 0.0) ** 2).sum(axis=0) / (Cij - 1)
        se = np.sqrt(var / Cij)
        tstat = np.where(se > 0, mean / se, np.where(mean == 0, 0.0, np.sign(mean) * np.inf))
    df = np.maximum(Cij - 1, 1)
    p = np.where(Cij >= 2, 2 * stats.t.sf(np.abs(tstat), df), np.nan)
    q = stats.t.ppf(0.5 + conf / 2, df)
    eye = np.eye(k, dtype=bool)
    mean, se, tstat, p = (np.where(eye, np.nan, x) for x in (mean, se, tstat, p))
    # Holm over every off-diagonal cell (k(k−1) hypotheses): the stars shown in both cells of a
    # pair then keep the family-wise error rate over everything displayed (ties make W_ij and
    # W_ji different quantities)
    off = ~eye
    ph = np.full((k, k), np.nan)
    ph[off] = holm_adjust(p[off])
    return {"diff": mean, "se": se, "t": tstat, "p_value": p, "p_holm": ph, "low": mean - q * se,
            "high": mean + q * se, "n_prompts": Cij, "n_clusters": C}


def position_bias(a, b, outcome, unit, cluster=None, conf: float = 0.95) -> dict:
    """Position bias when both orders of a judgement are judged (METHODS.md 7.2).

    Pairs the two rows of each judgement (same ``unit``, models swapped). flip rate = share of
    judgements whose model-level verdict differs between the two orders; first-position share =
    P(first-shown output wins | decisive verdict) over all rows (0.5 = no bias), with a
    cluster-robust SE (rows clustered by prompt, or by unit when no prompt ids).

    Args:
        a, b, outcome: (n,); unit: (n,) judgement ids (exactly two rows per paired unit; units
            with one row are counted as unpaired and left out of the flip rate); cluster: (n,)
            prompt ids or None; conf.
    Returns:
        dict: n_judgements (paired), n_unpaired, flip_rate, consistency (= 1 − flip_rate),
        first_win_share, first_win_se, first_win_low, first_win_high, tie_rate, per_row_clusters.
    """
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    outcome = np.asarray(outcome, np.int64)
    _, ucode = np.unique(np.asarray(unit), return_inverse=True)
    order = np.argsort(ucode, kind="stable")
    uc = ucode[order]
    counts = np.bincount(uc)
    if np.any(counts > 2):
        raise UserError(f"a judgement unit has {int(counts.max())} rows; expected 2 (one per presentation order)")
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    paired = counts == 2
    r0, r1 = order[start[paired]], order[start[paired] + 1]
    if np.any((a[r0] != b[r1]) | (b[r0] != a[r1])):
        raise UserError("the two rows of a judgement unit must show the same two models in swapped order")
    # model-level verdict relative to a[r0]: +1 a[r0] wins, −1 loses, 0 tie
    v0 = np.where(outcome[r0] == A_WINS, 1, np.where(outcome[r0] == B_WINS, -1, 0))
    v1 = np.where(outcome[r1] == A_WINS, -1, np.where(outcome[r1] == B_WINS, 1, 0))
    flip = float(np.mean(v0 != v1)) if r0.size else float("nan")
    dec = outcome != TIE
    y = (outcome[dec] == A_WINS).astype(float)
    codes, C, per_row = cluster_codes(None if cluster is None else np.asarray(cluster, object)[dec], int(dec.sum()))
    if per_row:
        codes = np.unique(ucode[dec], return_inverse=True)[1]
    pbar = float(y.mean()) if y.size else float("nan")
    sc = np.bincount(codes, weights=y - pbar)
    Cn = sc.size
    se = float(np.sqrt((sc ** 2).sum() * Cn / max(Cn - 1, 1)) / y.size) if y.size else float("nan")
    z = stats.norm.ppf(0.5 + conf / 2)
    return {"n_judgements": int(paired.sum()), "n_unpaired": int((counts == 1).sum()), "flip_rate": flip,
            "consistency": 1 - flip, "first_win_share": pbar, "first_win_se": se,
            "first_win_low": pbar - z * se, "first_win_high": pbar + z * se,
            "tie_rate": float(np.mean(~dec)), "per_row_clusters": cluster is None}


def holm_adjust(p) -> np.ndarray:
    """Holm step-down adjusted p-values: p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)).

    Controls the family-wise error rate at α (reject where p̃ ≤ α) under any dependence.
    NaN entries are left out of the family and stay NaN.

    Args:
        p: (m,) raw p-values.
    Returns:
        (m,) adjusted p-values.
    """
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    q = p[ok]
    m = q.size
    if m == 0:
        return out
    order = np.argsort(q, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * q[order]))
    res = np.empty(m)
    res[order] = adj
    out[ok] = res
    return out


def winrate_cluster_bootstrap_of(c: Comparisons, who: Who, rng: np.random.Generator, **kw) -> dict:
    """:func:`winrate_cluster_bootstrap` of the rows of ``c`` labelled by ``who``, clustered by its
    prompts (engine.stats.comparisons)."""
    return winrate_cluster_bootstrap(*c.outcomes(who), c.k, rng, cluster=c.clusters(who), **kw)
