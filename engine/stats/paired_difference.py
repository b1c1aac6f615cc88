"""The paired difference of two models over the same questions (docs/METHODS.md section 7.1).

Pure, vectorised functions over ``(Q, R)`` score matrices (``Q`` questions, ``R`` repeats) of two
models ``A``, ``B`` in one noise mode; questions are the independent units (clusters), repeats of a
question are not.

Family:

* :func:`paired_diff_ci`           Δ̂ = mean_i d_i, t CI/test over questions, correlation, bootstrap
  check, MDE
* :func:`paired_bootstrap_diff`    percentile CI of the accuracy difference, questions resampled
* :func:`variance_components_diff` between/within variance of the difference (docs/METHODS.md 5 on A − B)
* :func:`mcnemar`                  McNemar on independent paired binary outcomes (never (question,
  repeat) pairs)
* :func:`mcnemar_majority`         McNemar on ONE outcome per question (majority vote), labelled as such
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st

from engine.errors import UserError


def check_pair(A, B) -> tuple[np.ndarray, np.ndarray]:
    """Two (questions, repeats) score matrices of one shape as float64 arrays, else a UserError."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or A.shape != B.shape:
        raise UserError(
            f"score matrices must both be (questions, repeats) of one shape, got {A.shape} and {B.shape}"
        )
    if A.shape[0] < 1:
        raise UserError("score matrices are empty (no question scored by both models)")
    if np.isnan(A).any() or np.isnan(B).any():
        raise UserError("score matrices contain missing scores (NaN)")
    return A, B


def paired_diff_ci(
    A,
    B,
    rng: np.random.Generator | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    n_resamples: int = 2000,
) -> dict:
    """Paired comparison of two models on one benchmark, questions as the unit (docs/METHODS.md 7.1).

    d_i = (1/k) Σ_r (A_ir − B_ir);  Δ̂ = mean_i d_i;  SE = sd(d; ddof 1)/sqrt(n);
    CI = Δ̂ ± t_{n−1, 1−α/2} SE;  p = two-sided t test of Δ = 0;  MDE = (z_{1−α/2} + z_{1−β}) SE.

    Guarantee: cluster-robust (questions independent, repeats arbitrarily dependent), valid in
    both noise modes; exact for normal d_i, asymptotic otherwise. Coupling shrinks SE through
    the covariance of Proposition 1 (Benz et al.).

    Args:
        A, B: (n, k) scores of the two models (same questions, same repeat layout), n >= 2.
        rng: if given, also a paired bootstrap over questions (the check).
        alpha: test level / 1 − CI level.  power: 1 − β for the MDE.
    Returns:
        dict: diff, se, df, t, p_value, ci_low, ci_high, level, corr (Pearson correlation of
        the two models' per-question means; NaN if one is constant), mde, power, n_questions,
        n_repeats, sigma2_between, sigma2_within (the components of d, see
        :func:`variance_components_diff`), bootstrap ({se, ci_low, ci_high, n_resamples} or None).
    """
    A, B = check_pair(A, B)
    n, k = A.shape
    if n < 2:
        raise UserError(f"a paired t test needs at least 2 questions, got {n}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise UserError(f"alpha and power must be in (0, 1), got {alpha} and {power}")
    ma, mb = A.mean(axis=1), B.mean(axis=1)  # (n,)
    d = ma - mb
    diff = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n))
    tq = float(_st.t.ppf(1 - alpha / 2, n - 1))
    if se > 0:
        t = diff / se
        p = float(2 * _st.t.sf(abs(t), n - 1))
    else:
        t = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        p = 1.0 if diff == 0 else 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = float(np.corrcoef(ma, mb)[0, 1]) if ma.std() > 0 and mb.std() > 0 else float("nan")
    comp = (
        variance_components_diff(A, B)
        if k > 1
        else {"sigma2_between": float(d.var(ddof=1)), "sigma2_within": float("nan")}
    )
    boot = None
    if rng is not None:
        bt = paired_bootstrap_diff(A, B, rng, n_resamples=n_resamples, level=1 - alpha)
        boot = {key: bt[key] for key in ("se", "ci_low", "ci_high", "n_resamples")}
    mde = float((_st.norm.ppf(1 - alpha / 2) + _st.norm.ppf(power)) * se)
    return {
        "diff": diff,
        "se": se,
        "df": n - 1,
        "t": float(t),
        "p_value": p,
        "ci_low": diff - tq * se,
        "ci_high": diff + tq * se,
        "level": 1 - alpha,
        "corr": corr,
        "mde": mde,
        "power": power,
        "n_questions": int(n),
        "n_repeats": int(k),
        "sigma2_between": comp["sigma2_between"],
        "sigma2_within": comp["sigma2_within"],
        "bootstrap": boot,
    }


def paired_bootstrap_diff(
    A, B, rng: np.random.Generator, n_resamples: int = 2000, level: float = 0.95
) -> dict:
    """Paired bootstrap CI of the accuracy difference, resampling questions (clusters of repeats).

    Δ̂ = mean(A − B);  Δ*_b = (1/Q) Σ_i d̄_{I_bi},  I_bi ~ Uniform{1..Q} with replacement;
    CI = percentiles (1−level)/2, (1+level)/2 of Δ*.

    Guarantee: asymptotically valid as Q → ∞ for independent questions; repeats of one question
    stay together, so their dependence (and the coupling between A and B) is kept.

    Args:
        A, B: (Q, R) scores.  rng: random generator.
    Returns:
        dict with diff, se, ci_low, ci_high, n_resamples.
    """
    A, B = check_pair(A, B)
    d = (A - B).mean(axis=1)  # (Q,)
    Q = d.size
    idx = rng.integers(0, Q, size=(n_resamples, Q))  # (M, Q)
    reps = d[idx].mean(axis=1)  # (M,)
    a = (1 - level) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return {
        "diff": float(d.mean()),
        "se": float(reps.std(ddof=1)),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "n_resamples": int(n_resamples),
    }


def variance_components_diff(A, B) -> dict:
    """Between- and within-question variance of the score difference D = A − B.

    σ²_w = mean_i V_i (V_i = per-question var of D over repeats, ddof 1);
    σ²_b = (sample var over questions of D̄_i, ddof 1) − σ²_w / R, clipped at 0
    (an unbiased estimate of the variance of the true per-question mean difference).

    Args:
        A, B: (Q, R) scores, R >= 2.
    Returns:
        dict with sigma2_between, sigma2_within, Q, R.
    """
    A, B = check_pair(A, B)
    Q, R = A.shape
    D = A - B
    s2w = float(D.var(axis=1, ddof=1).mean()) if R > 1 else 0.0
    s2_means = float(D.mean(axis=1).var(ddof=1)) if Q > 1 else 0.0
    s2b = max(s2_means - s2w / R, 0.0)
    return {"sigma2_between": s2b, "sigma2_within": s2w, "Q": int(Q), "R": int(R)}


def mcnemar(a, b, exact_below: int = 25) -> dict:
    """McNemar's test of equal accuracy on paired binary outcomes.

    n10 = #(a=1, b=0), n01 = #(a=0, b=1); H0: P(n10) = P(n01).  Exact two-sided binomial test (n10 ~
    Bin(n10 + n01, 1/2)) when n10 + n01 < ``exact_below``, else χ²₁ = (|n10 − n01| − 1)² / (n10 + n01)
    (continuity-corrected).

    Guarantee: level-α test under H0 for independent pairs (the exact version at any size).
    NOT valid on (question, repeat) pairs: repeats of a question are dependent (size ~40% at 5%,
    docs/METHODS.md 7.1). Use :func:`paired_diff_ci`, or :func:`mcnemar_majority` for one outcome per
    question.

    Args:
        a, b: (P,) binary outcomes of the two models on the same P items.
    Returns:
        dict with n, n10, n01, statistic (χ² or None), p_value, method ('exact' | 'chi2').
    """
    a = np.asarray(a).astype(bool).ravel()
    b = np.asarray(b).astype(bool).ravel()
    if a.shape != b.shape:
        raise UserError(f"paired outcomes must have the same length, got {a.size} and {b.size}")
    n10 = int((a & ~b).sum())
    n01 = int((~a & b).sum())
    m = n10 + n01
    if m == 0:
        return {
            "n": int(a.size),
            "n10": 0,
            "n01": 0,
            "statistic": None,
            "p_value": 1.0,
            "method": "exact",
        }
    if m < exact_below:
        p = float(_st.binomtest(n10, m, 0.5, alternative="two-sided").pvalue)
        return {
            "n": int(a.size),
            "n10": n10,
            "n01": n01,
            "statistic": None,
            "p_value": min(p, 1.0),
            "method": "exact",
        }
    stat = (abs(n10 - n01) - 1) ** 2 / m
    return {
        "n": int(a.size),
        "n10": n10,
        "n01": n01,
        "statistic": float(stat),
        "p_value": float(_st.chi2.sf(stat, 1)),
        "method": "chi2",
    }


def mcnemar_majority(A, B, exact_below: int = 25) -> dict:
    """McNemar's test on ONE outcome per question: the majority vote over the repeats.

    a_i = 1{mean_r A_ir > 1/2} (ties at exactly 1/2 count as 0), b_i likewise; then
    :func:`mcnemar` on the n question-level pairs. Tests equal *majority-vote* accuracy, not equal
    expected accuracy: a different null from :func:`paired_diff_ci`.

    Guarantee: level-α for independent questions (one outcome each).

    Args:
        A, B: (n, k) scores.
    Returns:
        the :func:`mcnemar` dict plus outcome = "majority vote per question".
    """
    A, B = check_pair(A, B)
    out = mcnemar(A.mean(axis=1) > 0.5, B.mean(axis=1) > 0.5, exact_below=exact_below)
    out["outcome"] = "majority vote per question"
    return out
