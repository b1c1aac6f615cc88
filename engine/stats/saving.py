"""Sample saving of coupled over independent generation (docs/METHODS.md section 2), with intervals.

The HEADLINE saving (Home, Benchmark page, CLI) is the variance saving of the paired comparison
as run (Q questions x R repeats, questions the unit, docs/METHODS.md 7.1):

    saving = 1 − SE²_coupled / SE²_independent = 1 − var(d^c_i) / var(d^i_i)

(d_i = per-question mean score difference A − B; the share of questions coupled generation saves for the
same standard error of the difference). Its interval: studentised (jackknife SE on the log scale,
t_{Q−1}). Other figures, always labelled with their definition: the paper's resampling-curve saving at an
error ε (:func:`sample_saving`), the saving predicted at ε from the per-sample pool variances
(:func:`saving_predicted`), and the "questions factor" 1/(1 − saving) = SE²_ind / SE²_coup.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st

from engine.errors import UserError

# E|X| = σ sqrt(2/π) for X ~ N(0, σ²): converts a target mean absolute error to a standard error.
MAE_PER_SE = math.sqrt(2.0 / math.pi)

HEADLINE_SAVING = (
    "1 − SE²_coupled / SE²_independent of the paired difference over questions "
    "(same questions × repeats)"
)


def log_ratio_interval(
    log_full: float, log_jack: np.ndarray, level: float = 0.95
) -> tuple[float, float]:
    """Studentised interval for a log ratio: log_full ∓ t_{Q−1, (1+level)/2} SE_jack, SE_jack² = (Q−1)/Q
    Σ (J_i − J̄)².

    The jackknife (leave one question out) SE on the log scale, where a ratio of variances is close
    to normal; with t_{Q−1} it covered 0.95-0.96 at nominal 0.95 with 40 questions, where the
    percentile bootstrap covered 0.887 and BCa 0.92 (docs/REPRODUCTION.md).

    Args:
        log_full: the log ratio on all Q questions; log_jack: (Q,) leave-one-out log ratios.
    Returns:
        (low, high) on the log scale; NaN when some jackknife value is not finite.
    """
    J = np.asarray(log_jack, float)
    Q = J.size
    if Q < 3 or not np.all(np.isfinite(J)) or not np.isfinite(log_full):
        return float("nan"), float("nan")
    se = math.sqrt((Q - 1) / Q * float(np.sum((J - J.mean()) ** 2)))
    t = float(_st.t.ppf(0.5 + level / 2, Q - 1))
    return log_full - t * se, log_full + t * se


def _leave_one_out_var(sums: np.ndarray, n: int) -> np.ndarray:
    """Variance (ddof 1) of the data without each question, from (2, Q) per-question (sum, sum of
    squares) over n values."""
    t = sums.sum(axis=1, keepdims=True) - sums
    with np.errstate(invalid="ignore", divide="ignore"):
        return (t[1] - t[0] ** 2 / n) / (n - 1)


def variance_saving(Dc, Di, level: float = 0.95) -> dict:
    """The headline sample saving: 1 − var(d^c)/var(d^i), d_i = per-question mean difference A − B (ddof
    1).

    Equal to 1 − SE²_c/SE²_i of :func:`engine.stats.paired_difference.paired_diff_ci` on the same questions:
    the share of questions the coupled design saves for the same SE of the difference, at this
    many repeats. CI: studentised on log(var_c/var_i) with a leave-one-question-out jackknife SE
    and t_{Q−1} (:func:`log_ratio_interval`), mapped back through 1 − exp(·).

    Guarantee: asymptotically valid for independent questions; measured 0.958 ± 0.010 at nominal
    0.95 with 40 questions (docs/REPRODUCTION.md). None when a variance is 0 (no interval then).

    Args:
        Dc, Di: (Q, R) score differences A − B per (question, repeat), coupled and independent.
    Returns:
        dict: saving, ci_low, ci_high, level, questions_factor (1/(1 − saving) = SE²_i/SE²_c),
        var_coupled, var_independent, n_questions, method, definition.
    """
    dc = np.asarray(Dc, float).mean(axis=1)
    di = np.asarray(Di, float).mean(axis=1)
    if dc.shape != di.shape or dc.size < 2:
        raise UserError(f"need the same >= 2 questions in both modes, got {dc.size} and {di.size}")
    Q = dc.size
    vc, vi = float(dc.var(ddof=1)), float(di.var(ddof=1))
    sav = None if vi <= 0 else 1.0 - vc / vi
    out = {
        "saving": sav,
        "ci_low": None,
        "ci_high": None,
        "level": level,
        "questions_factor": None if sav is None or vc <= 0 else vi / vc,
        "var_coupled": vc,
        "var_independent": vi,
        "n_questions": int(Q),
        "method": "studentised: jackknife SE of log(var_c/var_i) over questions, t_{Q-1}",
        "definition": HEADLINE_SAVING,
    }
    if sav is None or vc <= 0:
        return out
    jc = _leave_one_out_var(np.stack([dc, dc**2]), Q - 1)
    ji = _leave_one_out_var(np.stack([di, di**2]), Q - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        lo, hi = log_ratio_interval(math.log(vc / vi), np.log(jc / ji), level)
    if np.isfinite(lo):
        out.update(ci_low=1.0 - math.exp(hi), ci_high=1.0 - math.exp(lo))
    return out


def samples_for_error(sizes, errors, eps: float) -> float | None:
    """n(ε): the sample size at which a (decreasing) error curve first reaches ε.

    Linear interpolation between the last size with error > ε and the first with error <= ε.
    Returns None when the curve never reaches ε, and sizes[0] when it is already there at the
    smallest size (a lower bound, not an extrapolation).
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    errors = np.asarray(errors, dtype=np.float64)
    below = np.nonzero(errors <= eps)[0]
    if below.size == 0:
        return None
    j = int(below[0])
    if j == 0:
        return float(sizes[0])
    n0, n1, e0, e1 = sizes[j - 1], sizes[j], errors[j - 1], errors[j]
    return float(n0 + (e0 - eps) / (e0 - e1) * (n1 - n0))


def sample_saving(sizes, err_coupled, err_independent, eps: float) -> dict:
    """Sample saving of coupled over independent generation at error ε.

    saving = 1 − n_coupled(ε) / n_independent(ε)  (both interpolated by :func:`samples_for_error`).

    Returns:
        dict with error, n_coupled, n_independent, saving (None where a curve never reaches ε),
        and at_smallest_size: True when a curve is already at ε at the smallest size (its n(ε) is then
        only an upper bound on the samples needed, so the saving is not exact).
    Paper: Benz et al., Sec. 5 (40% fewer samples at ε ≈ 0.034, college CS, 3B vs 1B).
    """
    nc = samples_for_error(sizes, err_coupled, eps)
    ni = samples_for_error(sizes, err_independent, eps)
    saving = None if nc is None or ni is None or ni <= 0 else 1.0 - nc / ni
    first = [np.asarray(e, dtype=np.float64)[0] <= eps for e in (err_coupled, err_independent)]
    return {
        "error": float(eps),
        "n_coupled": nc,
        "n_independent": ni,
        "saving": saving,
        "at_smallest_size": bool(any(first)),
    }


def error_at(sizes, errors, n: float) -> float:
    """The error curve linearly interpolated at sample size ``n`` (clamped to its ends)."""
    return float(np.interp(n, np.asarray(sizes, dtype=np.float64), np.asarray(errors, dtype=np.float64)))


def samples_for_error_fpc(S2, N: int, eps: float):
    """n(ε) predicted for the error curve: samples drawn without replacement from a pool of N.

    Var(mean of n) = S² (N − n)/(N n)  (finite-population correction; S² = pool variance, ddof 1);
    E|error| ≈ sqrt(2/π) sqrt(Var) (normal approximation), so n(ε) = S² N / (s² N + S²) with
    s = ε / sqrt(2/π). Broadcasts over S2.
    """
    s2 = (eps / MAE_PER_SE) ** 2
    S2 = np.asarray(S2, dtype=np.float64)
    return S2 * N / (s2 * N + S2)


def saving_predicted(
    Dc,
    Di,
    eps: float,
    rng: np.random.Generator | None = None,
    n_resamples: int = 2000,
    level: float = 0.95,
) -> dict:
    """Sample saving at error ε predicted from the per-sample variances, with a bootstrap CI over
    questions.

    saving(ε) = 1 − n_c(ε)/n_i(ε), n_m(ε) = S²_m N / (s² N + S²_m) (:func:`samples_for_error_fpc`), S²_m
    the variance (ddof 1) of the N = Q·R per-(question, repeat) differences D_m = A − B of mode m. For n
    ≪ N it tends to 1 − S²_c/S²_i. CI: studentised on log(n_c/n_i), jackknife over questions (the same
    question left out in both modes), t_{Q−1}; the bootstrap over questions is kept as ``n_valid``. NOT
    the headline saving (that is :func:`variance_saving`); shown labelled "predicted at error ε".

    Guarantee: asymptotically valid (Q → ∞) for independent questions, for the saving one would see on a
    fresh benchmark of Q questions × R repeats from the same question distribution. Assumes the normal
    approximation E|error| ∝ SD (what links the variance to the paper's mean-absolute-error curve).

    Args:
        Dc, Di: (Q, R) score differences A − B, coupled and independent, rows = the same questions.
        eps: the error level (mean absolute error), > 0.  rng: bootstrap generator (None: no CI).
    Returns:
        dict with error, saving, ci_low, ci_high, level, n_coupled, n_independent, s2_coupled,
        s2_independent, N, n_resamples, n_valid (replicates with S²_i > 0).
    """
    Dc = np.asarray(Dc, dtype=np.float64)
    Di = np.asarray(Di, dtype=np.float64)
    if Dc.ndim != 2 or Dc.shape != Di.shape:
        raise UserError(
            f"difference matrices must both be (questions, repeats) of one shape, got {Dc.shape} and "
            f"{Di.shape}"
        )
    if not eps > 0:
        raise UserError(f"error level must be > 0, got {eps}")
    Q, R = Dc.shape
    N = Q * R
    if N < 2:
        raise UserError(f"need at least 2 samples, got {N}")

    def saving_of(S2c, S2i):
        nc, ni = samples_for_error_fpc(S2c, N, eps), samples_for_error_fpc(S2i, N, eps)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ni > 0, 1.0 - nc / np.where(ni > 0, ni, 1.0), np.nan), nc, ni

    S2c, S2i = float(Dc.var(ddof=1)), float(Di.var(ddof=1))
    sav, nc, ni = saving_of(S2c, S2i)
    out: dict = {
        "error": float(eps),
        "saving": None if np.isnan(sav) else float(sav),
        "ci_low": None,
        "ci_high": None,
        "level": level,
        "n_coupled": float(nc),
        "n_independent": float(ni),
        "s2_coupled": S2c,
        "s2_independent": S2i,
        "N": int(N),
        "n_resamples": 0,
        "n_valid": 0,
    }
    if rng is None:
        return out
    # per-question sums of D and D² make each replicate's pool variance one gather + sum
    sums = np.stack([Dc.sum(axis=1), (Dc**2).sum(axis=1), Di.sum(axis=1), (Di**2).sum(axis=1)])  # (4, Q)
    reps = np.empty(n_resamples)
    chunk = max(1, int(2_000_000 // Q))
    for s in range(0, n_resamples, chunk):
        idx = rng.integers(0, Q, size=(min(chunk, n_resamples - s), Q))  # (c, Q)
        t = sums[:, idx].sum(axis=2)  # (4, c)
        v_c = (t[1] - t[0] ** 2 / N) / (N - 1)
        v_i = (t[3] - t[2] ** 2 / N) / (N - 1)
        reps[s : s + idx.shape[0]] = saving_of(v_c, v_i)[0]
    ok = reps[np.isfinite(reps)]
    a = (1 - level) / 2
    # studentised on the log scale (jackknife over questions: leave one question's R samples out);
    # the percentile interval covered 0.887 at nominal 0.95 with 40 questions (docs/REPRODUCTION.md)
    Nj = N - R
    jc = _leave_one_out_var(sums[:2], Nj)
    ji = _leave_one_out_var(sums[2:], Nj)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_j = np.log(samples_for_error_fpc(jc, Nj, eps) / samples_for_error_fpc(ji, Nj, eps))
        log_f = float(np.log(nc / ni)) if nc > 0 and ni > 0 else float("nan")
    lo, hi = log_ratio_interval(log_f, log_j, level)
    if np.isfinite(lo):
        out.update(
            ci_low=1.0 - math.exp(hi),
            ci_high=1.0 - math.exp(lo),
            ci_method="studentised: jackknife SE of log(n_c/n_i) over questions, t_{Q-1}",
        )
    elif ok.size:
        lo, hi = np.quantile(ok, [a, 1 - a])
        out.update(
            ci_low=float(lo),
            ci_high=float(hi),
            ci_method="percentile bootstrap over questions (approximate)",
        )
    out.update(n_resamples=int(n_resamples), n_valid=int(ok.size))
    return out
