"""Statistics layer of the judge audit: pure functions of numbers, no I/O.

Judge audit: how far an LLM judge can be trusted against human labels (docs/METHODS.md 9.2).

Every figure here is a smooth function of **per-prompt sums** of a few per-unit features, so the
prompt-clustered bootstrap (METHODS 7.2: draw C prompts with replacement, keep all their units) is
one matrix product: with ``S`` the (C, F) cluster sums and ``W`` the (B, C) cluster multiplicities
of B resamples, the resampled sums are ``W S`` (B, F), and the figure is applied row-wise. The
expanded percentile interval of the B values is the CI (:func:`interval`: the rule of every other
bootstrap interval of the product); the estimate is the figure of ``1ᵀ S``.

Outcome codes (every function): 0 = model_a preferred, 1 = model_b preferred, 2 = tie,
-1 = no label (a unit without a label is left out of a figure that needs one). A unit is one
(prompt, repeat, mode, model pair); ``cluster`` gives each unit's prompt code in ``[0, C)``.

Guarantee (asymptotic, for independent prompts and any dependence within a prompt): the
intervals of the cluster bootstrap cover the figure's population value with probability -> ``conf``
as the number of prompts grows; at 40 and 80 prompts, measured with known truth by
bench/audit_coverage.py (docs/REPRODUCTION.md, "Judge audit: interval coverage"), and by a seeded
coverage simulation in tests/test_judge_audit_stats.py. Paper: Efron & Tibshirani (1993) ch. 13 for
the percentile bootstrap, Hesterberg (2015) section 5.3 for its expansion; Cohen (1960) for kappa;
Kish's design effect for the effective number of judges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.errors import UserError
from engine.stats.clusters import cluster_multiplicities, expanded_tail

N_CATS = 3  # a, b, tie
A, B, TIE, MISSING = 0, 1, 2, -1

Figure = Callable[[np.ndarray], np.ndarray]  # (..., F) sums -> (..., P) values


@dataclass(frozen=True)
class Interval:
    """A figure's point estimate and percentile CI (NaN where undefined), each (P,)."""

    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def check_codes(x, name: str) -> np.ndarray:
    """Outcome codes as int64, each in {-1, 0, 1, 2} (UserError otherwise)."""
    arr = np.asarray(x, dtype=np.int64)
    if arr.size and (arr.min() < MISSING or arr.max() > TIE):
        raise UserError(
            f"{name}: outcome codes must be -1 (none), 0 (a), 1 (b) or 2 (tie); "
            f"got {sorted(set(arr.ravel().tolist()) - {-1, 0, 1, 2})[:5]}"
        )
    return arr


def cluster_sums(X: np.ndarray, cluster: np.ndarray, C: int) -> np.ndarray:
    """S[c] = sum of the rows of X in cluster c.

    Args:
        X: (n, F) per-unit features; cluster: (n,) codes in [0, C); C: number of clusters.
    Returns:
        (C, F) float64.
    """
    X = np.asarray(X, dtype=float)
    S = np.zeros((C, X.shape[1]))
    np.add.at(S, np.asarray(cluster, np.int64), X)
    return S


def bootstrap_weights(C: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(B, C) cluster multiplicities of B prompt-level resamples (rows sum to C), as float64."""
    return cluster_multiplicities(C, n_boot, rng).astype(float)


def interval(
    S: np.ndarray, W: np.ndarray, fn: Figure, conf: float = 0.95, method: str = "expanded"
) -> Interval:
    """Estimate fn(1ᵀS) and the cluster-bootstrap CI of fn(W S) over the B resamples.

    ``expanded`` (the default; the rule of every other bootstrap interval the product shows): the
    α'/2 and 1 − α'/2 quantiles, α'/2 = Φ(−sqrt(C/(C−1)) t_{C−1,(1+conf)/2}) with C the prompts that
    hold data for this figure (:func:`engine.stats.clusters.expanded_tail`); ``percentile``: the
    plain (1 − conf)/2 quantiles, which fall short with few prompts (bench/audit_coverage.py).
    Resamples where the figure is undefined (NaN, e.g. no unit drawn) are left out of the quantiles;
    a figure undefined on the data has NaN bounds.

    Args:
        S: (C, F) cluster sums; W: (B, C) multiplicities; fn: (..., F) -> (..., P); conf in (0, 1);
        method: "expanded" or "percentile".
    Returns:
        :class:`Interval` of (P,) arrays.
    """
    if method not in ("expanded", "percentile"):
        raise ValueError(f"method must be 'expanded' or 'percentile', got {method!r}")
    est = np.asarray(fn(S.sum(axis=0)[None, :]))[0]
    boot = np.asarray(fn(W @ S))  # (B, P)
    n_clusters = int(np.count_nonzero(np.any(S != 0, axis=1)))  # prompts with data for this figure
    q = expanded_tail(conf, n_clusters) if method == "expanded" else (1 - conf) / 2
    with np.errstate(all="ignore"):
        ok = np.isfinite(boot)
        lo = np.full(boot.shape[1], np.nan)
        hi = np.full(boot.shape[1], np.nan)
        for p in np.flatnonzero(ok.any(axis=0) & np.isfinite(est)):
            lo[p], hi[p] = np.quantile(boot[ok[:, p], p], [q, 1 - q])
    return Interval(est, lo, hi)


def _div(num, den, tiny: float = 0.0):
    """num / den where den > tiny, else NaN (elementwise, broadcasting)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = den > tiny
        return np.where(ok, num / np.where(ok, den, 1.0), np.nan)


safe_div = _div  # the public name, for the sibling figure modules (agreement, judge_bias)


# ---------------------------------------------------------------- agreement and Cohen's kappa


def agreement_features(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-unit features of agreement / kappa between raters x and y (units where both labelled).

    Columns: [x == y, onehot(x) (3), onehot(y) (3), 1]; rows with a missing label are all zero.

    Args:
        x, y: (n,) outcome codes.
    Returns:
        (n, 8).
    """
    x, y = check_codes(x, "rater 1"), check_codes(y, "rater 2")
    both = (x >= 0) & (y >= 0)
    F = np.zeros((x.shape[0], 2 * N_CATS + 2))
    F[:, 0] = both & (x == y)
    r = np.flatnonzero(both)
    F[r, 1 + x[r]] = 1.0
    F[r, 1 + N_CATS + y[r]] = 1.0
    F[:, -1] = both
    return F


def agreement_kappa_of_sums(S: np.ndarray) -> np.ndarray:
    """From summed :func:`agreement_features`: [p_o, kappa].

    p_o = sum 1[x = y] / n;  p_e = sum_c (n_x,c / n)(n_y,c / n);  kappa = (p_o - p_e) / (1 - p_e)
    (NaN when n = 0 or p_e = 1: a rater that uses one category leaves kappa undefined).

    Args:
        S: (..., 8) sums.
    Returns:
        (..., 2).
    """
    n = S[..., -1]
    po = _div(S[..., 0], n)
    px = _div(S[..., 1 : 1 + N_CATS], n[..., None])
    py = _div(S[..., 1 + N_CATS : 1 + 2 * N_CATS], n[..., None])
    pe = (px * py).sum(axis=-1)
    kappa = _div(po - pe, 1 - pe, tiny=1e-12)
    return np.stack([po, kappa], axis=-1)


# ---------------------------------------------------------------- per-model judge bias (PPR rectifiers)


def bias_features(
    first: np.ndarray, second: np.ndarray, judge: np.ndarray, human: np.ndarray, k: int
) -> np.ndarray:
    """Per-unit features of b_m (units where both labelled): [involves m (k), judge win of m (k), human
    win of m (k)].

    Args:
        first, second: (n,) model indices in [0, k) of model_a, model_b; judge, human: (n,) codes.
    Returns:
        (n, 3k).
    """
    first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
    judge, human = check_codes(judge, "judge"), check_codes(human, "human")
    r = np.flatnonzero((judge >= 0) & (human >= 0))
    F = np.zeros((first.shape[0], 3 * k))
    F[r, first[r]] = 1.0
    F[r, second[r]] = 1.0
    for off, lab in ((k, judge), (2 * k, human)):
        F[r, off + first[r]] += lab[r] == A
        F[r, off + second[r]] += lab[r] == B
    return F


def bias_of_sums(S: np.ndarray) -> np.ndarray:
    """b_m = (sum judge wins of m - sum human wins of m) / #units with m: the judge's strict win-rate
    of m minus the humans' on the same units (> 0: the judge favours m). PPR's rectifier with lambda = 1.

    Args:
        S: (..., 3k) sums of :func:`bias_features`.
    Returns:
        (..., k).
    """
    k = S.shape[-1] // 3
    return _div(S[..., k : 2 * k] - S[..., 2 * k :], S[..., :k])


# ---------------------------------------------------------------- position consistency


def position_features(w_ab: np.ndarray, w_ba: np.ndarray) -> np.ndarray:
    """Per-unit features of position consistency and first-position preference.

    ``w_ab`` / ``w_ba``: the judge's verdict in MODEL terms (0 = model_a, 1 = model_b, 2 = tie,
    -1 = none) when model_a / model_b was shown first. Un-swapped, a verdict keeps its winner when
    w_ab == w_ba. The first-shown output is picked when w_ab = 0 or w_ba = 1.

    Columns: [consistent, both parsed, first picked (0-2), decisive verdicts (0-2)].

    Args:
        w_ab, w_ba: (n,) codes.
    Returns:
        (n, 4).
    """
    w_ab, w_ba = check_codes(w_ab, "verdict ab"), check_codes(w_ba, "verdict ba")
    both = (w_ab >= 0) & (w_ba >= 0)
    F = np.zeros((w_ab.shape[0], 4))
    F[:, 0] = both & (w_ab == w_ba)
    F[:, 1] = both
    F[:, 2] = both * ((w_ab == A).astype(float) + (w_ba == B))
    F[:, 3] = both * (np.isin(w_ab, (A, B)).astype(float) + np.isin(w_ba, (A, B)))
    return F


def position_of_sums(S: np.ndarray) -> np.ndarray:
    """[consistency, first-position preference]: consistency = share of units judged in both orders
    whose winner survives the swap; preference = P(first shown picked | decisive verdict) - 1/2.

    Args:
        S: (..., 4) sums of :func:`position_features`.
    Returns:
        (..., 2).
    """
    return np.stack([_div(S[..., 0], S[..., 1]), _div(S[..., 2], S[..., 3]) - 0.5], axis=-1)


# ---------------------------------------------------------------- several judges


def majority(labels: np.ndarray) -> np.ndarray:
    """Majority of J judges per unit: the unique most frequent label, else tie (2); -1 where any judge is
    missing.

    Args:
        labels: (n, J) codes.
    Returns:
        (n,) codes.
    """
    labels = check_codes(labels, "judges")
    counts = np.stack([(labels == c).sum(axis=1) for c in range(N_CATS)], axis=1)  # (n, 3)
    top = counts.max(axis=1)
    unique = (counts == top[:, None]).sum(axis=1) == 1
    out = np.where(unique, counts.argmax(axis=1), TIE)
    return np.where((labels < 0).any(axis=1), MISSING, out)


def error_features(judges: np.ndarray, human: np.ndarray) -> np.ndarray:
    """Per-unit features of the judges' error correlation (units where every judge and the human
    labelled).

    e_j = 1[judge_j != human]. Columns: [e (J), e eᵀ flattened (J²), 1].

    Args:
        judges: (n, J) codes; human: (n,) codes.
    Returns:
        (n, J + J² + 1).
    """
    judges, human = check_codes(judges, "judges"), check_codes(human, "human")
    n, J = judges.shape
    ok = (judges >= 0).all(axis=1) & (human >= 0)
    e = ((judges != human[:, None]) & ok[:, None]).astype(float)
    return np.concatenate(
        [e, (e[:, :, None] * e[:, None, :]).reshape(n, J * J), ok[:, None].astype(float)], axis=1
    )


def error_correlation_of_sums(S: np.ndarray) -> np.ndarray:
    """[rho_bar, J_eff, corr (J²)]: Pearson correlations of the error indicators, their mean over pairs
    j < j' (pairs with a constant error left out), and J_eff = J / (1 + (J - 1) rho_bar).

    Args:
        S: (..., J + J² + 1) sums of :func:`error_features`.
    Returns:
        (..., 2 + J²).
    """
    J = int(round((-1 + np.sqrt(1 + 4 * (S.shape[-1] - 1))) / 2))
    n = S[..., -1]
    m = _div(S[..., :J], n[..., None])  # (..., J)
    mm = _div(S[..., J : J + J * J], n[..., None]).reshape(*S.shape[:-1], J, J)
    cov = mm - m[..., :, None] * m[..., None, :]
    sd = np.sqrt(np.maximum(np.diagonal(cov, axis1=-2, axis2=-1), 0.0))
    corr = _div(cov, sd[..., :, None] * sd[..., None, :])
    iu = np.triu_indices(J, 1)
    pairs = corr[..., iu[0], iu[1]]
    with np.errstate(all="ignore"):
        finite = np.isfinite(pairs)
        rho = np.where(
            finite.any(axis=-1), np.nansum(pairs, axis=-1) / np.maximum(finite.sum(axis=-1), 1), np.nan
        )
    jeff = _div(np.full_like(rho, float(J)), 1 + (J - 1) * rho)
    return np.concatenate([rho[..., None], jeff[..., None], corr.reshape(*S.shape[:-1], J * J)], axis=-1)
