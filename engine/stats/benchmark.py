"""Benchmark comparison of two models, coupled vs independent generation (docs/METHODS.md section 2).

Pure, vectorised functions over ``(Q, R)`` score matrices (``Q`` questions, ``R`` repeats) of two models
``A``, ``B`` in one noise mode. Paper: Benz et al. 2025, Proposition 1, Fig. 2 and Appendix D.

Family:

* :func:`per_question_covariance`  Cov_i = sample cov (ddof 1) of (A_ir, B_ir) over r
* :func:`per_question_var_diff`    V_i  = sample var (ddof 1) of A_ir − B_ir over r
* :func:`kde_curve`                Gaussian KDE on a grid (degenerate data handled; reflection at a bound)
* :func:`resample_permutations`    the random permutations the error curves share
* :func:`error_curve`              mean |truth − mean of n samples| + 2.5/97.5 percentile band
* :func:`error_curve_naive`        the same with explicit loops (the test oracle)
* the savings (:mod:`engine.stats.saving`, re-exported): the headline variance saving, the paper's
  resampling-curve saving, the saving predicted from the per-sample variances
* :func:`paired_diff_ci`           Δ̂ = mean_i d_i, t CI/test over questions, correlation, bootstrap check, MDE
* :func:`mcnemar_majority`         McNemar on ONE outcome per question (majority vote), labelled as such
* :func:`mcnemar`                  McNemar on independent paired binary outcomes (never (question, repeat) pairs)
* :func:`paired_bootstrap_diff`    percentile CI of the accuracy difference, questions resampled
* :func:`variance_components_diff` between/within variance of the difference (docs/METHODS.md 5 on A − B)
* :func:`independent_components`   σ²_b, σ²_w of independent generation predicted from a coupled run
* :func:`predict_se`               SE(n, k) = sqrt(σ²_b/n + σ²_w/(n k))
* :func:`paired_power`             power of the paired t test at effect Δ for an n × k design
* :func:`plan_mde`                 questions × repeats (coupled vs independent) for MDE = x at power 1 − β
* :func:`plan_sample_size`         questions × repeats for a target standard error / error
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st

from engine.errors import UserError
from engine.stats.saving import (  # noqa: F401  (re-exported: the saving family lives in saving.py)
    HEADLINE_SAVING,
    MAE_PER_SE,
    error_at,
    log_ratio_interval,
    sample_saving,
    samples_for_error,
    samples_for_error_fpc,
    saving_predicted,
    variance_saving,
)


def _pair(A, B) -> tuple[np.ndarray, np.ndarray]:
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or A.shape != B.shape:
        raise UserError(f"score matrices must both be (questions, repeats) of one shape, got {A.shape} and {B.shape}")
    if A.shape[0] < 1:
        raise UserError("score matrices are empty (no question scored by both models)")
    if np.isnan(A).any() or np.isnan(B).any():
        raise UserError("score matrices contain missing scores (NaN)")
    return A, B


def per_question_covariance(A, B) -> np.ndarray:
    """Per-question covariance of two models' scores over the repeats (coupled mode).

    Cov_i = (1/(R−1)) Σ_r (A_ir − Ā_i)(B_ir − B̄_i).

    Args:
        A, B: (Q, R) scores of the two models, R >= 2.
    Returns:
        (Q,) covariances.
    Paper: Benz et al., Fig. 2(a) (its mean is marked).
    """
    A, B = _pair(A, B)
    R = A.shape[1]
    if R < 2:
        raise UserError(f"need at least 2 repeats per question for a covariance, got {R}")
    return ((A - A.mean(axis=1, keepdims=True)) * (B - B.mean(axis=1, keepdims=True))).sum(axis=1) / (R - 1)


def per_question_var_diff(A, B) -> np.ndarray:
    """Per-question variance of the score difference over the repeats.

    V_i = (1/(R−1)) Σ_r (D_ir − D̄_i)²,  D = A − B.  Proposition 1: E V_coupled = E V_indep − 2 E Cov.

    Args:
        A, B: (Q, R) scores, R >= 2.
    Returns:
        (Q,) variances.
    Paper: Benz et al., Fig. 2(b) (the median is marked).
    """
    A, B = _pair(A, B)
    if A.shape[1] < 2:
        raise UserError(f"need at least 2 repeats per question for a variance, got {A.shape[1]}")
    return (A - B).var(axis=1, ddof=1)


def kde_curve(x, grid=None, n_grid: int = 200, fallback_bw: float = 0.02, lower: float | None = None) -> dict:
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
        dens = np.where(grid >= lower, f(grid) + f(2 * lower - grid), 0.0)  # reflect the mass below L back
    return {"x": grid.tolist(), "density": dens.tolist(), "bandwidth": h, "degenerate": bool(degenerate),
            "lower": lower}


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


def resample_permutations(N: int, n_resamples: int, rng: np.random.Generator, length: int | None = None) -> np.ndarray:
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
        return np.stack([rng.choice(N, size=length, replace=False, shuffle=True) for _ in range(n_resamples)])
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
        raise UserError(f"sample sizes must lie in 1..{min(diff.size, perms.shape[1])}, got {sizes.min()}..{L}")
    truth = float(diff.mean())
    M = perms.shape[0]
    a = (1 - level) / 2 * 100
    errs = np.empty((M, sizes.size))  # (M, S)
    # Chunk the permutations so the (chunk, L) gather + cumsum stays small on big pools.
    chunk = max(1, int(4_000_000 // L))
    for s in range(0, M, chunk):
        csum = np.cumsum(diff[perms[s:s + chunk, :L]], axis=1)  # (c, L)
        errs[s:s + chunk] = np.abs(truth - csum[:, sizes - 1] / sizes)  # (c, S)
    lo, hi = np.percentile(errs, [a, 100 - a], axis=0)
    return {"n": sizes.tolist(), "mean": errs.mean(axis=0).tolist(), "low": lo.tolist(),
            "high": hi.tolist(), "truth": truth}


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


def mcnemar(a, b, exact_below: int = 25) -> dict:
    """McNemar's test of equal accuracy on paired binary outcomes.

    n10 = #(a=1, b=0), n01 = #(a=0, b=1); H0: P(n10) = P(n01).  Exact two-sided binomial test
    (n10 ~ Bin(n10 + n01, 1/2)) when n10 + n01 < ``exact_below``, else χ²₁ = (|n10 − n01| − 1)² / (n10 + n01)
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
        return {"n": int(a.size), "n10": 0, "n01": 0, "statistic": None, "p_value": 1.0, "method": "exact"}
    if m < exact_below:
        p = float(_st.binomtest(n10, m, 0.5, alternative="two-sided").pvalue)
        return {"n": int(a.size), "n10": n10, "n01": n01, "statistic": None, "p_value": min(p, 1.0), "method": "exact"}
    stat = (abs(n10 - n01) - 1) ** 2 / m
    return {"n": int(a.size), "n10": n10, "n01": n01, "statistic": float(stat),
            "p_value": float(_st.chi2.sf(stat, 1)), "method": "chi2"}


def paired_bootstrap_diff(A, B, rng: np.random.Generator, n_resamples: int = 2000, level: float = 0.95) -> dict:
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
    A, B = _pair(A, B)
    d = (A - B).mean(axis=1)  # (Q,)
    Q = d.size
    idx = rng.integers(0, Q, size=(n_resamples, Q))  # (M, Q)
    reps = d[idx].mean(axis=1)  # (M,)
    a = (1 - level) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return {"diff": float(d.mean()), "se": float(reps.std(ddof=1)), "ci_low": float(lo),
            "ci_high": float(hi), "n_resamples": int(n_resamples)}


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
    A, B = _pair(A, B)
    Q, R = A.shape
    D = A - B
    s2w = float(D.var(axis=1, ddof=1).mean()) if R > 1 else 0.0
    s2_means = float(D.mean(axis=1).var(ddof=1)) if Q > 1 else 0.0
    s2b = max(s2_means - s2w / R, 0.0)
    return {"sigma2_between": s2b, "sigma2_within": s2w, "Q": int(Q), "R": int(R)}


def plan_sample_size(sigma2_between: float, sigma2_within: float, target_se: float | None = None,
                     target_error: float | None = None, repeats=(1, 2, 5, 10)) -> list[dict]:
    """Questions × repeats needed for a target precision of the estimated difference.

    Var(mean diff over n questions × k repeats) = σ²_b / n + σ²_w / (n k)  (docs/METHODS.md 5 on differences), so
    n(k) = ceil((σ²_b + σ²_w / k) / se²).  A target mean absolute error ε is converted with
    se = ε / sqrt(2/π) (E|N(0, se²)| = se sqrt(2/π)).

    Args:
        sigma2_between, sigma2_within: from :func:`variance_components_diff` of one mode.
        target_se or target_error: exactly one.
        repeats: the k values to plan for.
    Returns:
        list of {repeats, questions, samples} dicts.
    """
    if (target_se is None) == (target_error is None):
        raise UserError("give exactly one of target_se and target_error")
    if target_se is None:
        assert target_error is not None  # exactly one of the two is given (checked above)
        if not target_error > 0:
            raise UserError(f"target error must be > 0, got {target_error}")
        target_se = target_error / MAE_PER_SE
    if not target_se > 0:
        raise UserError(f"target standard error must be > 0, got {target_se}")
    out = []
    for k in repeats:
        k = int(k)
        if k < 1:
            raise UserError(f"repeats must be >= 1, got {k}")
        n = max(1, math.ceil((sigma2_between + sigma2_within / k) / target_se ** 2))
        out.append({"repeats": k, "questions": int(n), "samples": int(n * k)})
    return out


# ----------------------------------------------------------------------------- docs/METHODS.md 7.1

def paired_diff_ci(A, B, rng: np.random.Generator | None = None, alpha: float = 0.05, power: float = 0.8,
                   n_resamples: int = 2000) -> dict:
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
    A, B = _pair(A, B)
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
    comp = variance_components_diff(A, B) if k > 1 else {"sigma2_between": float(d.var(ddof=1)), "sigma2_within": float("nan")}
    boot = None
    if rng is not None:
        bt = paired_bootstrap_diff(A, B, rng, n_resamples=n_resamples, level=1 - alpha)
        boot = {key: bt[key] for key in ("se", "ci_low", "ci_high", "n_resamples")}
    mde = float((_st.norm.ppf(1 - alpha / 2) + _st.norm.ppf(power)) * se)
    return {"diff": diff, "se": se, "df": n - 1, "t": float(t), "p_value": p, "ci_low": diff - tq * se,
            "ci_high": diff + tq * se, "level": 1 - alpha, "corr": corr, "mde": mde, "power": power,
            "n_questions": int(n), "n_repeats": int(k), "sigma2_between": comp["sigma2_between"],
            "sigma2_within": comp["sigma2_within"], "bootstrap": boot}


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
    A, B = _pair(A, B)
    out = mcnemar(A.mean(axis=1) > 0.5, B.mean(axis=1) > 0.5, exact_below=exact_below)
    out["outcome"] = "majority vote per question"
    return out


def independent_components(A, B) -> dict:
    """Variance components of d under INDEPENDENT generation, predicted from a COUPLED run.

    σ²_w,ind = mean_i (var_r A_ir + var_r B_ir) (ddof 1: = mean_i [V_i + 2 Cov_i], Proposition 1);
    σ²_b is the variance of the true per-question mean difference, the same in both modes.

    Args:
        A, B: (n, k) coupled-run scores, k >= 2.
    Returns:
        dict with sigma2_between, sigma2_within, Q, R (like :func:`variance_components_diff`).
    """
    A, B = _pair(A, B)
    if A.shape[1] < 2:
        raise UserError(f"need at least 2 repeats per question, got {A.shape[1]}")
    comp = variance_components_diff(A, B)
    comp["sigma2_within"] = float((A.var(axis=1, ddof=1) + B.var(axis=1, ddof=1)).mean())
    return comp


def predict_se(sigma2_between, sigma2_within, n, k):
    """SE of Δ̂ for an n-question × k-repeat design: sqrt(σ²_b/n + σ²_w/(n k)) (broadcasts over n, k)."""
    n = np.asarray(n, float)
    k = np.asarray(k, float)
    return np.sqrt(sigma2_between / n + sigma2_within / (n * k))


def paired_power(delta: float, sigma2_between: float, sigma2_within: float, n, k, alpha: float = 0.05):
    """Power of the two-sided paired t test (:func:`paired_diff_ci`) at true effect Δ.

    power = P(|T| > t_{n−1,1−α/2}), T ~ noncentral t(n − 1, Δ/SE(n, k)); SE from :func:`predict_se`
    (d_i treated as normal). Broadcasts over n, k.
    """
    n = np.asarray(n, float)
    se = predict_se(sigma2_between, sigma2_within, n, k)
    df = n - 1
    tq = _st.t.ppf(1 - alpha / 2, df)
    ncp = delta / se
    return _st.nct.sf(tq, df, ncp) + _st.nct.cdf(-tq, df, ncp)


def plan_mde(components: dict, mde: float, alpha: float = 0.05, power: float = 0.8,
             repeats=(1, 2, 5, 10), max_questions: int = 10_000_000) -> list[dict]:
    """How many questions × repeats reach a minimum detectable effect, per noise mode.

    For each mode and k: the smallest n with paired_power(mde, σ²_b, σ²_w, n, k, α) >= power
    (starting from the normal solution n = (z_{1−α/2} + z_{1−β})² (σ²_b + σ²_w/k) / mde²).

    Args:
        components: {mode: {"sigma2_between", "sigma2_within"}} e.g. {"coupled":
            variance_components_diff(Ac, Bc), "independent": independent_components(Ac, Bc)
            or variance_components_diff(Ai, Bi)}.
        mde: the effect (accuracy difference) to detect, > 0.  alpha, power, repeats.
    Returns:
        list of {mode, repeats, questions, samples, se, power} rows (questions None if above max_questions).
    """
    if not mde > 0:
        raise UserError(f"the minimum detectable effect must be > 0, got {mde}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise UserError(f"alpha and power must be in (0, 1), got {alpha} and {power}")
    zz = _st.norm.ppf(1 - alpha / 2) + _st.norm.ppf(power)
    rows = []
    for mode, c in components.items():
        sb, sw = float(c["sigma2_between"]), float(c["sigma2_within"])
        for k in repeats:
            k = int(k)
            if k < 1:
                raise UserError(f"repeats must be >= 1, got {k}")
            n = max(2, math.ceil(zz ** 2 * (sb + sw / k) / mde ** 2))
            if sb + sw / k <= 0:
                n = 2
            while n <= max_questions and paired_power(mde, sb, sw, n, k, alpha) < power:
                n = n + max(1, n // 100)
            # step back to the smallest n that reaches the power (the coarse steps above overshoot)
            while n > 2 and paired_power(mde, sb, sw, n - 1, k, alpha) >= power:
                n -= 1
            ok = n <= max_questions
            rows.append({"mode": mode, "repeats": k, "questions": int(n) if ok else None,
                         "samples": int(n * k) if ok else None,
                         "se": float(predict_se(sb, sw, n, k)) if ok else None,
                         "power": float(paired_power(mde, sb, sw, n, k, alpha)) if ok else None})
    return rows
