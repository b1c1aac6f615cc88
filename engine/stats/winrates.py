"""Statistics layer of win-rates: pure functions of numbers, no I/O.

Pairwise win-rates, confidence intervals, coupled-vs-independent tests, Bradley-Terry (Davidson ties),
Elo.

Implements docs/METHODS.md section 3 (Benz et al., *Evaluation of LLMs via Coupled Token Generation*,
seed 002, Section 4 / Fig. 3 / Table 1 / Proposition 4) and the "beyond the paper" rating models.

Data convention (every function): comparison ``i`` is between model ``a[i]`` (shown/listed
first) and model ``b[i]`` (integer indices in ``[0, k)``) with ``outcome[i]`` in
``{A_WINS, B_WINS, TIE}`` = ``{0, 1, 2}``. Unlabelled comparisons are dropped by the caller.
Win-rates are strict: a tie is a non-win for both (tie rates are reported separately).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from engine.errors import UserError
from engine.stats.comparisons import Comparisons, Who

A_WINS, B_WINS, TIE = 0, 1, 2


def _check(a, b, outcome, k: int):
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    outcome = np.asarray(outcome, dtype=np.int64)
    if not (a.shape == b.shape == outcome.shape) or a.ndim != 1:
        raise UserError(
            f"a, b, outcome must be 1-d arrays of one length; got {a.shape}, {b.shape}, {outcome.shape}"
        )
    if a.size and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= k):
        raise UserError(f"model indices must be in [0, {k})")
    if np.any(a == b):
        raise UserError("a comparison must involve two different models (model_a == model_b found)")
    if np.any((outcome < 0) | (outcome > 2)):
        raise UserError("outcome codes must be 0 (a wins), 1 (b wins) or 2 (tie)")
    return a, b, outcome


# ----------------------------------------------------------------------------- counts and rates


def pairwise_counts(a, b, outcome, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """wins[i, j] = #{i preferred over j}, ties[i, j] = #{tie between i and j}, n[i, j] = #{comparisons
    of i and j}.

    Args:
        a, b, outcome: (n,) arrays (see module docstring); k: number of models.
    Returns:
        wins (k, k), ties (k, k) symmetric, n (k, k) symmetric; int arrays.
    """
    a, b, outcome = _check(a, b, outcome, k)
    winner = np.where(outcome == A_WINS, a, b)
    loser = np.where(outcome == A_WINS, b, a)
    dec = outcome != TIE
    wins = np.zeros((k, k), np.int64)
    np.add.at(wins, (winner[dec], loser[dec]), 1)
    ties = np.zeros((k, k), np.int64)
    np.add.at(ties, (a[~dec], b[~dec]), 1)
    ties = ties + ties.T
    n = np.zeros((k, k), np.int64)
    np.add.at(n, (a, b), 1)
    return wins, ties, n + n.T


def winrate_matrix(a, b, outcome, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W[i, j] = wins[i, j] / n[i, j] (P(i's output preferred over j's)), T[i, j] = ties[i, j] / n[i, j].

    Unbiased per pair; W + W^T + T = 1 off the diagonal. NaN where a pair has no comparison
    (and on the diagonal). Paper: seed 002, Eq. 24 (independent) and Eq. 31 (coupled).

    Args:
        a, b, outcome: (n,); k: number of models.
    Returns:
        W (k, k), T (k, k), n (k, k) counts.
    """
    wins, ties, n = pairwise_counts(a, b, outcome, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        W = np.where(n > 0, wins / np.maximum(n, 1), np.nan)
        T = np.where(n > 0, ties / np.maximum(n, 1), np.nan)
    np.fill_diagonal(W, np.nan)
    np.fill_diagonal(T, np.nan)
    return W, T, n


def wilson_interval(x, n, conf: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n) for a binomial
    proportion.

    Coverage close to ``conf`` even for small n or p near 0/1 (unlike the Wald interval).
    NaN where n = 0.

    Args:
        x: successes, n: trials (broadcastable arrays); conf: confidence level.
    Returns:
        lower, upper arrays of the broadcast shape.
    """
    x = np.asarray(x, float)
    n = np.asarray(n, float)
    z = stats.norm.ppf(0.5 + conf / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = x / n
        den = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / den
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / den
    lo = np.where(n > 0, centre - half, np.nan)
    hi = np.where(n > 0, centre + half, np.nan)
    return lo, hi


def cluster_wilson(p, n_eff, conf: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of a proportion at an effective sample size: :func:`wilson_interval` of (p
    n_eff, n_eff).

    With clustered rows n_eff = p(1 − p)/SE²_cluster (the rows' count divided by the design effect);
    where that is undefined (p = 0 or 1, or a zero cluster-robust SE: every prompt says the same)
    the caller passes the number of prompts, the most conservative count that still treats prompts as
    independent. Always inside [0, 1] and never of zero width for finite n_eff (docs/METHODS.md 7: a
    degenerate bootstrap falls back to an interval that does not collapse).

    Args:
        p: proportions; n_eff: effective sample sizes (> 0; NaN/0 give NaN); conf.
    Returns:
        lower, upper (broadcast shape).
    """
    p = np.asarray(p, float)
    n = np.asarray(n_eff, float)
    lo, hi = wilson_interval(p * n, n, conf)
    return np.where(p <= 0, 0.0, np.clip(lo, 0.0, 1.0)), np.where(
        p >= 1, 1.0, np.clip(hi, 0.0, 1.0)
    )  # exact ends


def n_eff_clustered(p, se, n_clusters):
    """n_eff = p(1 − p)/SE² (cluster-robust SE), or the number of clusters where p ∈ {0, 1} or SE = 0."""
    p = np.asarray(p, float)
    se = np.asarray(se, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        n = np.where((se > 0) & (p > 0) & (p < 1), p * (1 - p) / se**2, np.asarray(n_clusters, float))
    return n


def average_winrate(
    W: np.ndarray, n: np.ndarray, conf: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """avg_m = mean_{j != m, n_mj > 0} W[m, j], with a delta-method normal CI, Var = sum_j W(1-W)/n_mj /
    K_m^2.

    The per-pair win-rates are independent binomial proportions (disjoint comparisons), so the
    variance of their mean is the sum of their variances over K_m^2 (K_m = opponents with data).
    Paper: seed 002, Table 1 / Fig. 3 ("average win-rate").

    Args:
        W: (k, k) win-rate matrix (NaN where undefined); n: (k, k) counts; conf: level.
    Returns:
        avg (k,), lower (k,), upper (k,).
    """
    has = (n > 0) & ~np.eye(W.shape[0], dtype=bool)  # (k, k)
    K = has.sum(axis=1)
    Wz = np.where(has, W, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        avg = Wz.sum(axis=1) / K
        var = np.where(has, Wz * (1 - Wz) / np.maximum(n, 1), 0.0).sum(axis=1) / K**2
    z = stats.norm.ppf(0.5 + conf / 2)
    half = z * np.sqrt(var)
    return avg, avg - half, avg + half


def two_proportion_ztest(x1, n1, x2, n2) -> tuple[np.ndarray, np.ndarray]:
    """Pooled two-tailed z-test of p1 = p2: z = (p1 - p2) / sqrt(p(1-p)(1/n1 + 1/n2)), p = (x1 + x2) /
    (n1 + n2).

    Asymptotically level-exact under H0. Used per pair to compare coupled vs independent
    win-rates (paper seed 002, Fig. 3). z = 0, p-value = 1 when the pooled proportion is 0 or 1;
    NaN when a sample is empty.

    Args:
        x1, n1, x2, n2: broadcastable counts.
    Returns:
        z, p_value arrays.
    """
    x1, n1, x2, n2 = (np.asarray(v, float) for v in (x1, n1, x2, n2))
    with np.errstate(invalid="ignore", divide="ignore"):
        p1, p2 = x1 / n1, x2 / n2
        pool = (x1 + x2) / (n1 + n2)
        se = np.sqrt(pool * (1 - pool) * (1 / n1 + 1 / n2))
        z = np.where(se > 0, (p1 - p2) / se, 0.0)
    z = np.where((n1 > 0) & (n2 > 0), z, np.nan)
    return z, 2 * stats.norm.sf(np.abs(z))


def significance_stars(p) -> np.ndarray:
    """Stars as in the coupled-generation paper's figures: '****' p < 1e-4, '***' < 1e-3, '**' < 1e-2,
    '*' < 0.05, else ''.

    Args:
        p: p-values (any shape).
    Returns:
        array of strings of the same shape.
    """
    p = np.asarray(p, float)
    out = np.full(p.shape, "", dtype=object)
    for thr, s in ((0.05, "*"), (0.01, "**"), (1e-3, "***"), (1e-4, "****")):
        out = np.where(p < thr, s, out)
    return out


def population_average_winrate(p_pref: np.ndarray, prompt_weights: np.ndarray, mode: str) -> np.ndarray:
    """Exact average win-rate of single-token answers: sum_q P(q) mean_{j != k} E[1{R_k > R_j} | q].

    With one preferred answer per prompt and P(model k gives it) = p_k(q):
    coupled (shared noise; Gumbel-max over two answers is a common-threshold rule)
    E[1{R_k > R_j}] = (p_k - p_j)_+; independent E = p_k (1 - p_j). Paper: seed 002,
    Proposition 4 and Appendix B.6 (docs/METHODS.md section 3's exact test case).

    Args:
        p_pref: (k, Q) probabilities of the preferred answer; prompt_weights: (Q,) P(q);
        mode: "coupled" | "independent".
    Returns:
        (k,) average win-rates.
    """
    p = np.asarray(p_pref, float)
    wq = np.asarray(prompt_weights, float)
    k = p.shape[0]
    if mode == "coupled":
        e = np.maximum(p[:, None, :] - p[None, :, :], 0.0)  # (k, k, Q)
    elif mode == "independent":
        e = p[:, None, :] * (1 - p[None, :, :])  # (k, k, Q)
        e[np.arange(k), np.arange(k)] = 0.0
    else:
        raise UserError(f"unknown mode {mode!r}; allowed: coupled, independent")
    return (e.sum(axis=1) / (k - 1)) @ wq


# ----------------------------------------------------------------------------- Bradley-Terry with ties


def davidson_fit(
    a, b, outcome, k: int, max_iter: int = 2_000, tol: float = 1e-10
) -> tuple[np.ndarray, float]:
    """Bradley-Terry with Davidson ties by MM: P(i > j) = pi_i / D, P(tie) = nu sqrt(pi_i pi_j) / D,
    D = pi_i + pi_j + nu sqrt(pi_i pi_j).

    Maximum likelihood by Hunter's (2004) MM / fixed-point updates, all models at once: pi_i <- (2 W_i +
    T_i) / sum_j n_ij (2 + nu sqrt(pi_j / pi_i)) / D_ij, nu <- T / sum_{i<j} n_ij sqrt(pi_i pi_j) / D_ij.
    Strengths are identified up to scale: returned as beta = log pi with mean 0. A model that never wins
    nor ties has MLE beta = -inf (floored at log 1e-12).

    Args:
        a, b, outcome: (n,) comparisons; k: number of models.
    Returns:
        beta (k,) log-strengths (mean 0), nu (>= 0) tie parameter.
    """
    wins, ties, n = pairwise_counts(a, b, outcome, k)
    n = n.astype(float)
    score = 2 * wins.sum(axis=1) + ties.sum(axis=1)  # (k,) 2 W_i + T_i
    T = ties.sum() / 2
    pi = np.ones(k)
    nu = 1.0 if T > 0 else 0.0
    for _ in range(max_iter):
        s = np.sqrt(np.outer(pi, pi))  # (k, k)
        D = pi[:, None] + pi[None, :] + nu * s
        ratio = np.sqrt(pi[None, :] / pi[:, None])  # (k, k) sqrt(pi_j / pi_i)
        den = (n * (2 + nu * ratio) / D).sum(axis=1)
        new = np.where(den > 0, score / np.where(den > 0, den, 1.0), pi)
        new = np.maximum(new, 1e-12)
        new /= np.exp(np.mean(np.log(new)))  # geometric mean 1
        s = np.sqrt(np.outer(new, new))
        D = new[:, None] + new[None, :] + nu * s
        nu_new = T / ((n * s / D).sum() / 2) if T > 0 else 0.0
        done = np.max(np.abs(np.log(new) - np.log(pi))) < tol and abs(nu_new - nu) < tol
        pi, nu = new, nu_new
        if done:
            break
    beta = np.log(pi)
    return beta - beta.mean(), float(nu)


def davidson_probabilities(beta: np.ndarray, nu: float) -> tuple[np.ndarray, np.ndarray]:
    """P[i, j] = P(i preferred over j) and Ptie[i, j] under the Davidson model.

    Args:
        beta: (k,) log-strengths; nu: tie parameter.
    Returns:
        P (k, k), Ptie (k, k) (diagonals are meaningless).
    """
    pi = np.exp(np.asarray(beta, float))
    s = np.sqrt(np.outer(pi, pi))
    D = pi[:, None] + pi[None, :] + nu * s
    return pi[:, None] / D, nu * s / D


def davidson_loglik(beta: np.ndarray, nu: float, a, b, outcome) -> float:
    """Log-likelihood sum_i log P(outcome_i) of the Davidson model (used to check the MM fit)."""
    a, b, outcome = (np.asarray(v, np.int64) for v in (a, b, outcome))
    P, Pt = davidson_probabilities(beta, nu)
    p = np.where(outcome == A_WINS, P[a, b], np.where(outcome == B_WINS, P[b, a], Pt[a, b]))
    return float(np.sum(np.log(p)))


# ----------------------------------------------------------------------------- Elo


def elo_ratings(
    a, b, outcome, k: int, K: float = 4.0, scale: float = 400.0, base: float = 10.0, init: float = 1000.0
) -> np.ndarray:
    """Online Elo in the given order: r_a += K (S_a - E_a), E_a = 1 / (1 + base^((r_b - r_a) / scale)), S
    = 1, 0, 1/2 (tie).

    Order-dependent by construction (later comparisons weigh more). K = 4 as in the LMSYS
    Chatbot Arena notebook. Inherently sequential: one pass over the comparisons.

    Args:
        a, b, outcome: (n,) comparisons in time order; k: number of models.
    Returns:
        (k,) ratings.
    """
    a, b, outcome = _check(a, b, outcome, k)
    r = np.full(k, float(init))
    s_a = np.where(outcome == A_WINS, 1.0, np.where(outcome == B_WINS, 0.0, 0.5))
    for i, j, s in zip(a.tolist(), b.tolist(), s_a.tolist()):
        e = 1.0 / (1.0 + base ** ((r[j] - r[i]) / scale))
        r[i] += K * (s - e)
        r[j] -= K * (s - e)
    return r


def bootstrap_ci(
    statistic, a, b, outcome, k: int, rng: np.random.Generator, reps: int = 200, conf: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile bootstrap over comparisons: resample n comparisons with replacement, recompute
    ``statistic``.

    For Elo the resample also reshuffles the order (as in the Arena's bootstrap), which removes
    most of the order dependence. Valid when comparisons are i.i.d.

    Args:
        statistic: f(a, b, outcome, k) -> (k,) array; a, b, outcome: (n,); k: models;
        rng: the randomness; reps: resamples; conf: level.
    Returns:
        lower (k,), upper (k,), draws (reps, k).
    """
    a, b, outcome = _check(a, b, outcome, k)
    n = a.shape[0]
    draws = np.empty((reps, k))
    for r in range(reps):
        idx = rng.integers(0, n, n)
        draws[r] = statistic(a[idx], b[idx], outcome[idx], k)
    tail = (1 - conf) / 2
    return np.quantile(draws, tail, axis=0), np.quantile(draws, 1 - tail, axis=0), draws


def pairwise_counts_of(c: Comparisons, who: Who) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`pairwise_counts` of the rows of ``c`` labelled by ``who`` (engine.stats.comparisons)."""
    return pairwise_counts(*c.outcomes(who), c.k)
