"""Statistics layer of the judge biases: pure functions of numbers, no I/O.

Judge biases users ask about (pure statistics): length bias, self-preference, and drift between two
judgings of the same units. Like :mod:`engine.stats.judge_audit`, every figure is a function of per-prompt
sums of per-unit features, so :func:`engine.stats.judge_audit.interval` gives its prompt-clustered
bootstrap interval with the audit's shared resamples.

Outcome codes as in :mod:`engine.stats.judge_audit` (0 = model_a, 1 = model_b, 2 = tie, -1 = none). A
tie is never a win: a "share of wins of the longer response" counts the units whose label picks the
longer response over the units considered (the strict win-rate of the audit's bias figure).

Papers: the length bias of LLM judges (Dubois et al. 2024, "Length-controlled AlpacaEval"; Zheng et al.
2023, "Judging LLM-as-a-judge", section 4 "verbosity bias", which also names self-enhancement bias);
Stuart (1955) and Maxwell (1970) for the test of marginal homogeneity, here with prompt-cluster sums
(a cluster-robust score test; with one unit per prompt it is Stuart-Maxwell, and McNemar for two
categories).
"""

from __future__ import annotations

import numpy as np
from scipy import stats as _st

from engine.stats.judge_audit import TIE, A, B, bias_of_sums, check_codes, safe_div

# ---------------------------------------------------------------- length bias


def longer_side(len_a: np.ndarray, len_b: np.ndarray) -> np.ndarray:
    """0 where model_a's response is longer, 1 where model_b's is, -1 where equal or unknown (NaN).

    Args:
        len_a, len_b: (n,) response lengths (tokens or characters).
    Returns:
        (n,) int64.
    """
    la, lb = np.asarray(len_a, float), np.asarray(len_b, float)
    with np.errstate(invalid="ignore"):
        return np.where(la > lb, A, np.where(lb > la, B, -1)).astype(np.int64)


def length_features(judge: np.ndarray, human: np.ndarray, longer: np.ndarray) -> np.ndarray:
    """Per-unit features of the length figures (units whose two responses differ in length).

    Columns: [judge and human labelled, judge picks the longer (of those), human picks the longer (of
    those), judge labelled, judge picks the longer (of those)].

    Args:
        judge, human: (n,) outcome codes; longer: (n,) from :func:`longer_side`.
    Returns:
        (n, 5).
    """
    judge, human = check_codes(judge, "judge"), check_codes(human, "human")
    longer = np.asarray(longer, np.int64)
    known = longer >= 0
    jl, hl = known & (judge >= 0), known & (human >= 0)
    both = jl & hl
    F = np.zeros((judge.shape[0], 5))
    F[:, 0] = both
    F[:, 1] = both & (judge == longer)
    F[:, 2] = both & (human == longer)
    F[:, 3] = jl
    F[:, 4] = jl & (judge == longer)
    return F


def length_bias_of_sums(S: np.ndarray) -> np.ndarray:
    """[judge share, human share, judge − human, judge share on every judged unit]: shares of the units
    whose label picks the longer response (> 1/2: the longer response wins more often than not; the
    difference > 0: the judge prefers the longer response more than people do on the same units).

    Args:
        S: (..., 5) sums of :func:`length_features`.
    Returns:
        (..., 4).
    """
    j = safe_div(S[..., 1], S[..., 0])
    h = safe_div(S[..., 2], S[..., 0])
    return np.stack([j, h, j - h, safe_div(S[..., 4], S[..., 3])], axis=-1)


def length_bins(gap: np.ndarray, n_bins: int = 4) -> np.ndarray:
    """Edges of ``n_bins`` quantile bins of the absolute length difference (units with a difference);
    fewer when the differences take fewer values.

    Args:
        gap: (n,) |len_a − len_b| (NaN unknown, 0 equal: both left out).
    Returns:
        (m + 1,) increasing edges; bin i is (edges[i], edges[i + 1]], the first closed below.
    """
    g = np.asarray(gap, float)
    g = g[np.isfinite(g) & (g > 0)]
    if g.size == 0:
        return np.zeros(0)
    return np.unique(np.quantile(g, np.linspace(0, 1, n_bins + 1)))


# ---------------------------------------------------------------- self-preference


def self_preference_of_sums(S: np.ndarray, model: int) -> np.ndarray:
    """[b_s, mean of b_m over the other models, b_s − that mean] from the sums of
    :func:`engine.stats.judge_audit.bias_features` (b_m = the judge's strict win-rate of m minus the
    humans' on the same units). > 0: the judge favours model ``s`` (of its own family) beyond how it
    treats the others.

    Args:
        S: (..., 3k) bias sums; model: the candidate's index s.
    Returns:
        (..., 3).
    """
    b = bias_of_sums(S)
    others = np.delete(b, model, axis=-1)
    with np.errstate(all="ignore"):
        ok = np.isfinite(others)
        mean = np.where(
            ok.any(axis=-1), np.nansum(others, axis=-1) / np.maximum(ok.sum(axis=-1), 1), np.nan
        )
    return np.stack([b[..., model], mean, b[..., model] - mean], axis=-1)


# ---------------------------------------------------------------- drift: the same units judged twice


def drift_features(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Per-unit features of two judgings of one unit (units with both verdicts).

    Columns: [both, changed, 1[second = a] − 1[first = a], 1[second = b] − 1[first = b],
    1[second = tie] − 1[first = tie]].

    Args:
        first, second: (n,) outcome codes.
    Returns:
        (n, 5).
    """
    first, second = check_codes(first, "first judging"), check_codes(second, "second judging")
    both = (first >= 0) & (second >= 0)
    F = np.zeros((first.shape[0], 5))
    F[:, 0] = both
    F[:, 1] = both & (first != second)
    for col, c in ((2, A), (3, B), (4, TIE)):
        F[:, col] = both * ((second == c).astype(float) - (first == c))
    return F


def drift_of_sums(S: np.ndarray) -> np.ndarray:
    """[changed, shift a, shift b, shift tie]: the share of units whose verdict changed, and the change
    in the share of a / b / tie verdicts (second minus first).

    Args:
        S: (..., 5) sums of :func:`drift_features`.
    Returns:
        (..., 4).
    """
    n = S[..., 0]
    return np.stack([safe_div(S[..., c], n) for c in range(1, 5)], axis=-1)


def marginal_homogeneity_test(
    first: np.ndarray, second: np.ndarray, cluster: np.ndarray, C: int
) -> tuple[float | None, int, float | None]:
    """Did the verdicts change systematically? H0: the two judgings have the same distribution of a / b
    / tie (marginal homogeneity). The cluster-robust score test:

        T = Dᵀ V⁺ D,  D = Σ_c D_c,  V = Σ_c D_c D_cᵀ,  D_c = Σ_{u in prompt c} (e(second_u) − e(first_u))

    over the a and b coordinates (tie is their complement), χ² with rank(V) degrees of freedom. With one
    unit per prompt it is the Stuart-Maxwell statistic, and McNemar's (b − c)² / (b + c) for two
    categories. Guarantee: asymptotic in the number of prompts (prompts independent, any dependence within
    a prompt); its size is checked by a seeded simulation in tests/test_judge_bias_stats.py.

    Args:
        first, second: (n,) codes; cluster: (n,) prompt codes in [0, C); C: prompts.
    Returns:
        (statistic, df, p-value); (None, 0, None) when no unit has both verdicts, and (0.0, 0, 1.0)
        when no verdict changed.
    """
    F = drift_features(first, second)
    if F[:, 0].sum() == 0:
        return None, 0, None
    Dc = np.zeros((C, 2))
    np.add.at(Dc, np.asarray(cluster, np.int64), F[:, 2:4])
    D = Dc.sum(axis=0)
    V = Dc.T @ Dc
    df = int(np.linalg.matrix_rank(V))
    if df == 0:
        return 0.0, 0, 1.0
    stat = float(D @ np.linalg.pinv(V) @ D)
    return stat, df, float(_st.chi2.sf(stat, df))
