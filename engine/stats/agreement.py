"""Agreement beyond Cohen's kappa (pure statistics): Gwet's AC1, Krippendorff's alpha, and sensitivity /
specificity of binary labels, each a function of the per-unit sums of
:func:`engine.stats.judge_audit.agreement_features` (or of :func:`binary_features`), so that the judge
audit's one-product prompt-clustered bootstrap (:func:`engine.stats.judge_audit.interval`) gives their
intervals with the same resamples as every other figure.

Why beyond kappa: kappa's chance term p_e = Σ_c p_x,c p_y,c is large when both raters put most units in
one category, so two raters who agree on 95% of units can get kappa near 0 (the "kappa paradox",
Feinstein & Cicchetti 1990). AC1's chance term is small exactly then (Gwet 2008); Krippendorff's alpha
pools the two raters' category use and corrects for the finite sample (Krippendorff 2011). Showing the
three side by side says whether a low kappa is disagreement or skew.

Scale: the three categories a / b / tie (codes 0 / 1 / 2; :data:`engine.stats.judge_audit.N_CATS`),
whether or not both raters use all three. Units with a missing label (-1) are left out.

Guarantee of the intervals: as the judge audit's (asymptotic in the number of prompts; prompts
independent, any dependence within a prompt); each figure's coverage is checked by a seeded
simulation in tests/test_agreement_stats.py.
"""

from __future__ import annotations

import numpy as np

from engine.stats.judge_audit import N_CATS, TIE, A, B, check_codes, safe_div


def agreement_coefficients_of_sums(S: np.ndarray) -> np.ndarray:
    """[p_o, kappa, AC1, alpha] from summed :func:`engine.stats.judge_audit.agreement_features`.

    With n units, p_o the share of agreeing units, p_x,c / p_y,c each rater's share of category c
    (q = 3 categories) and π_c = (p_x,c + p_y,c) / 2:

        kappa = (p_o − Σ_c p_x,c p_y,c) / (1 − Σ_c p_x,c p_y,c)                      (Cohen 1960)
        AC1   = (p_o − p_e) / (1 − p_e),  p_e = Σ_c π_c (1 − π_c) / (q − 1)          (Gwet 2008)
        alpha = 1 − (2n − 1)(1 − p_o) / (2n − Σ_c (2n π_c)² / (2n))                  (Krippendorff 2011,
                nominal, two coders, no missing value: 2n pairable values, n_c = 2n π_c)

    Each is NaN where its denominator is 0 (n = 0, or one category used by everyone).

    Args:
        S: (..., 8) sums of ``agreement_features``.
    Returns:
        (..., 4).
    """
    n = S[..., -1]
    po = safe_div(S[..., 0], n)
    px = safe_div(S[..., 1 : 1 + N_CATS], n[..., None])
    py = safe_div(S[..., 1 + N_CATS : 1 + 2 * N_CATS], n[..., None])
    pe_k = (px * py).sum(axis=-1)
    kappa = safe_div(po - pe_k, 1 - pe_k, tiny=1e-12)
    pi = (px + py) / 2
    pe_g = (pi * (1 - pi)).sum(axis=-1) / (N_CATS - 1)
    ac1 = safe_div(po - pe_g, 1 - pe_g, tiny=1e-12)
    m = 2 * n  # pairable values
    nc = m[..., None] * pi  # values per category over both coders
    de = m - (nc * nc).sum(axis=-1) / np.where(m > 0, m, 1.0)  # (m² − Σ n_c²) / m
    alpha = 1 - safe_div((m - 1) * (1 - po), de, tiny=1e-12)
    return np.stack([po, kappa, ac1, alpha], axis=-1)


def labels_binary(x: np.ndarray, y: np.ndarray) -> bool:
    """True when no unit that both raters labelled has a tie from either: the labels are binary (a / b)
    and sensitivity / specificity are defined."""
    x, y = check_codes(x, "rater 1"), check_codes(y, "rater 2")
    both = (x >= 0) & (y >= 0)
    return bool(both.any() and not ((x[both] == TIE) | (y[both] == TIE)).any())


def binary_features(judge: np.ndarray, human: np.ndarray) -> np.ndarray:
    """Per-unit features of sensitivity and specificity of the judge against the human (units both
    labelled a or b): [human a, human a & judge a, human b, human b & judge b].

    Args:
        judge, human: (n,) outcome codes.
    Returns:
        (n, 4).
    """
    judge, human = check_codes(judge, "judge"), check_codes(human, "human")
    ok = np.isin(judge, (A, B)) & np.isin(human, (A, B))
    F = np.zeros((judge.shape[0], 4))
    F[:, 0] = ok & (human == A)
    F[:, 1] = ok & (human == A) & (judge == A)
    F[:, 2] = ok & (human == B)
    F[:, 3] = ok & (human == B) & (judge == B)
    return F


def sensitivity_specificity_of_sums(S: np.ndarray) -> np.ndarray:
    """[sensitivity, specificity, balanced accuracy]: P(judge a | human a), P(judge b | human b) and
    their mean; "a" (the pair's model_a preferred) is the positive class.

    Args:
        S: (..., 4) sums of :func:`binary_features`.
    Returns:
        (..., 3).
    """
    sens = safe_div(S[..., 1], S[..., 0])
    spec = safe_div(S[..., 3], S[..., 2])
    return np.stack([sens, spec, (sens + spec) / 2], axis=-1)
