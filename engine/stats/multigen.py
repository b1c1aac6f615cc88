"""Statistics layer of multiple generations: pure functions of numbers, no I/O.

Multiple generations per prompt (docs/METHODS.md section 5; Zhang et al., "Beyond the Singular").

Pure, vectorised functions over an ``(n, k)`` matrix ``Y`` of 0/1 (or [0, 1]) scores: ``n``
prompts, ``k`` generations each. Hierarchical model: ``p_i ~ P(mu, sigma)``,
``y_ij ~ Bernoulli(p_i)``.

Family:

* :func:`p_correct`               p̂_i = mean_j y_ij
* :func:`clopper_pearson`         the exact binomial interval for x of n
* :func:`proportion_interval`     the per-model accuracy interval: Clopper-Pearson for one 0/1 score
  per question, else t (Clopper-Pearson at 0 and 1)
* :func:`score_variance`          μ̂, Var̂(μ̂) = σ̂²/n, t CI, unbiased within/between components
* :func:`bootstrap_score_ci`      percentile bootstrap over prompts (the check of the above)
* :func:`single_generation_scores` column means of Y and their spread (best - worst)
* :func:`semantic_consistency`    S_i = Σ_c Prop_c log Prop_c from an (n, k) cluster-id matrix
* :func:`largest_answer_cluster`  size of the biggest cluster of answered generations per prompt
* :func:`data_map_flags`          p̂_i <= p_max and S_i >= s_min (and an answer shared by >= 2
  generations)
"""

from __future__ import annotations

import numpy as np
from scipy import stats as _st

from engine.errors import UserError

Z95 = float(_st.norm.ppf(0.975))


def _as_matrix(Y, name: str = "Y") -> np.ndarray:
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[0] < 1 or Y.shape[1] < 1:
        raise UserError(
            f"{name} must be a non-empty (n prompts, k generations) matrix, got shape {Y.shape}"
        )
    if np.isnan(Y).any():
        raise UserError(
            f"{name} contains missing scores (NaN); every prompt needs all k generations scored"
        )
    return Y


def p_correct(Y) -> np.ndarray:
    """P(correct) per prompt: p̂_i = (1/k) Σ_j y_ij.

    Args:
        Y: (n, k) scores.
    Returns:
        (n,) per-prompt mean score.
    Paper: Zhang et al., Sec. 2 (the empirical difficulty of a prompt).
    """
    return _as_matrix(Y).mean(axis=1)


def clopper_pearson(x: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval for x successes in n independent trials (Clopper & Pearson, 1934).

    low = Beta⁻¹(α/2; x, n − x + 1) (0 at x = 0),  high = Beta⁻¹(1 − α/2; x + 1, n − x) (1 at x = n).

    Guarantee: P(p ∈ [low, high]) ≥ 1 − α for every p in [0, 1] and every n (each tail misses with
    probability ≤ α/2); exact, no large-sample approximation. At x = 0 the bound is 1 − (α/2)^(1/n).

    Args:
        x: successes, 0 <= x <= n;  n: trials (>= 1);  conf: the level (α = 1 − conf).
    Returns:
        (low, high) within [0, 1].
    """
    if not (n >= 1 and 0 <= x <= n):
        raise ValueError(f"clopper_pearson needs 0 <= x <= n and n >= 1, got x={x}, n={n}")
    a = 1 - conf
    low = 0.0 if x == 0 else float(_st.beta.ppf(a / 2, x, n - x + 1))
    high = 1.0 if x == n else float(_st.beta.ppf(1 - a / 2, x + 1, n - x))
    return low, high


def proportion_interval(p, k: int, conf: float = 0.95, crit: float | None = None) -> tuple[float, float]:
    """THE per-model accuracy interval (summary, Benchmark page, accuracy-ranks, multigen, the report)
    from the per-question mean scores p̂_i (k repeats each, scores in [0, 1]):

    * one repeat and 0/1 scores: x = Σ_i p̂_i correct of n questions, the exact Clopper-Pearson
      interval (:func:`clopper_pearson`);
    * repeats or partial credit: the t interval μ̂ ± t_{n−1} sd(p̂)/√n intersected with [0, 1], and at
      an all-0 or all-1 score (SE 0) the Clopper-Pearson bound for n questions, [0, 1 − (α/2)^(1/n)]
      or [(α/2)^(1/n), 1].

    Guarantee: with questions drawn independently (the clusters of METHODS 7) and one 0/1 score each,
    every score is Bernoulli(μ) and the count Binomial(n, μ), so the coverage is ≥ 1 − α at every μ;
    the t interval of such scores covers only 0.86-0.90 at its worst over μ with 8-40 questions at
    95% (bench/accuracy_interval_coverage.py, docs/INTERVALS.md). At the boundary P(all n questions
    score 0) ≤ Π_i (1 − p_i) ≤ (1 − p̄)^n whatever the dependence between a question's repeats, so
    the bound misses with probability ≤ α/2. With repeats or partial credit the t interval over
    questions (clusters) is asymptotically exact (n → ∞).

    Args:
        p: (n,) per-question mean scores in [0, 1]; k: repeats per question; conf: the level;
        crit: a fixed critical value for the t interval (default t_{n−1, (1+conf)/2}).
    Returns:
        (low, high) within [0, 1]; NaN when n < 2 and the t interval is needed.
    """
    p = np.asarray(p, dtype=np.float64)
    n = int(p.size)
    mu = float(p.mean()) if n else float("nan")
    if k == 1 and n >= 1 and np.all((p == 0.0) | (p == 1.0)):
        return clopper_pearson(int(p.sum()), n, conf)
    if n >= 1 and mu in (0.0, 1.0):
        edge = float(((1 - conf) / 2) ** (1 / n))
        return (0.0, 1 - edge) if mu == 0.0 else (edge, 1.0)
    if n < 2:
        return float("nan"), float("nan")
    se = float(p.std(ddof=1) / np.sqrt(n))
    c = float(_st.t.ppf(0.5 + conf / 2, n - 1)) if crit is None else float(crit)
    return max(mu - c * se, 0.0), min(mu + c * se, 1.0)


def score_variance(Y, z: float | None = None, conf: float = 0.95) -> dict:
    """Benchmark score with a t interval and the unbiased within/between-prompt decomposition.

    μ̂ = (1/nk) Σ_ij y_ij;  σ̂² = (1/(n−1)) Σ_i (p̂_i − μ̂)²;  Var̂(μ̂) = σ̂²/n;  CI = μ̂ ±
    t_{n−1,(1+conf)/2} sqrt(Var̂). Decomposition (Lemma 2.1, each term unbiased): within E[p(1−p)] ≈ w =
    mean_i p̂_i(1−p̂_i) k/(k−1), between σ² ≈ b = max(0, σ̂² − mean_i p̂_i(1−p̂_i)/(k−1));  var_within =
    w/(nk), var_between = b/n, so var_within + var_between = Var̂(μ̂) unless b is clipped at 0.

    Guarantee: E[σ̂²] = σ² + E[p(1−p)]/k, so σ̂²/n is unbiased for Var(μ̂) = (μ − μ² − σ²)/(nk) + σ²/n
    (the paper's plug-in adds the within term a second time: up to ~1.3x too wide). The t
    interval is asymptotically exact (n → ∞) for independent prompts. Agrees with
    :func:`engine.stats.paired_difference.variance_components_diff` applied to (Y, 0) for 0/1 scores.

    When every score lies in [0, 1] (0/1 correctness, a rate), μ does too: the interval is
    :func:`proportion_interval` (an all-0 or all-1 score gets the exact Clopper-Pearson bound for n
    questions instead of the point [0, 0] or [1, 1]), otherwise intersected with [0, 1]: with few
    prompts μ̂ ± t·se leaves it (e.g. [0.363, 1.137] for n = 8, k = 2, μ̂ = 0.75), which no probability
    can. Intersecting an interval with a set known to hold μ
    keeps its coverage exactly: it covers μ after the intersection iff it did before. Scores outside
    [0, 1] (an imported harness metric on another scale) leave the interval as it is.

    Args:
        Y: (n, k) scores in [0, 1].
        z: optional fixed critical value (overrides the t quantile; kept for callers that pass 1.96).
        conf: confidence level.
    Returns:
        dict with mu, sigma2_hat (σ̂²), within (w), sigma2_between (b), var_within, var_between, var,
        se, df, ci_low, ci_high (within [0, 1] for scores in [0, 1]), n, k. With n = 1, var/se/CI are
        NaN; with k = 1 the decomposition is NaN.
    Paper: Zhang et al., Lemma 2.1; docs/METHODS.md section 5 (amended).
    """
    Y = _as_matrix(Y)
    n, k = Y.shape
    p = Y.mean(axis=1)  # (n,)
    mu = float(p.mean())
    sigma2 = float(p.var(ddof=1)) if n > 1 else float("nan")
    pq = float(np.mean(p * (1 - p)))
    if k > 1:
        within = pq * k / (k - 1)
        between = max(0.0, sigma2 - pq / (k - 1)) if n > 1 else float("nan")
    else:
        within = between = float("nan")
    var = sigma2 / n
    se = float(np.sqrt(var))
    crit = (
        float(z)
        if z is not None
        else (float(_st.t.ppf(0.5 + conf / 2, n - 1)) if n > 1 else float("nan"))
    )
    lo, hi = mu - crit * se, mu + crit * se
    if (
        n > 1 and Y.min() >= 0.0 and Y.max() <= 1.0
    ):  # μ is a probability: [0, 1], and the exact bound at 0 or 1
        lo, hi = proportion_interval(p, k, conf, None if z is None else crit)
    return {
        "mu": mu,
        "sigma2_hat": sigma2,
        "within": within,
        "sigma2_between": between,
        "var_within": within / (n * k),
        "var_between": between / n,
        "var": var,
        "se": se,
        "df": n - 1,
        "ci_low": lo,
        "ci_high": hi,
        "n": int(n),
        "k": int(k),
    }


def bootstrap_score_ci(
    Y, rng: np.random.Generator, n_resamples: int = 2000, level: float = 0.95
) -> dict:
    """Percentile bootstrap over prompts (clusters) of μ̂: resample rows of Y with replacement.

    Guarantee: consistent CI for μ as n → ∞ (no model assumption beyond independent prompts).

    Args:
        Y: (n, k) scores.
        rng: the random generator (passed in; nothing seeds globally).
        n_resamples: B bootstrap replicates.
        level: confidence level.
    Returns:
        dict with se (std of the B replicates), ci_low, ci_high.
    """
    p = p_correct(Y)  # (n,)
    n = p.shape[0]
    idx = rng.integers(0, n, size=(n_resamples, n))  # (B, n)
    reps = p[idx].mean(axis=1)  # (B,)
    a = (1 - level) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return {"se": float(reps.std(ddof=1)), "ci_low": float(lo), "ci_high": float(hi)}


def single_generation_scores(Y) -> dict:
    """The k benchmark scores one would report from a single generation per prompt.

    s_j = (1/n) Σ_i y_ij;  spread = max_j s_j − min_j s_j (best minus worst single run).

    Args:
        Y: (n, k) scores.
    Returns:
        dict with scores (list of k floats), best, worst, spread.
    Paper: Zhang et al., Sec. 3 (instability of single-generation evaluation).
    """
    s = _as_matrix(Y).mean(axis=0)  # (k,)
    return {
        "scores": s.tolist(),
        "best": float(s.max()),
        "worst": float(s.min()),
        "spread": float(s.max() - s.min()),
    }


def semantic_consistency(C) -> np.ndarray:
    """Negative semantic entropy per prompt: S_i = Σ_c Prop_ic log Prop_ic.

    Prop_ic is the share of prompt i's k generations in cluster c. 0 = all in one cluster;
    the minimum, −log k, = all different. Cluster ids only need to be comparable within a row.

    Args:
        C: (n, k) integer cluster ids.
    Returns:
        (n,) S values in [−log k, 0].
    Paper: Zhang et al., Sec. 4 (semantic consistency, data map).
    """
    C = np.asarray(C)
    if C.ndim != 2 or C.shape[0] < 1 or C.shape[1] < 1:
        raise UserError(
            f"cluster ids must be a non-empty (n prompts, k generations) matrix, got shape {C.shape}"
        )
    n, k = C.shape
    # Relabel clusters within each row as 0..(distinct-1): sort the row, a new label starts
    # wherever the sorted value changes. Then one bincount over (row, label) keys counts every
    # cluster of every row at once.
    s = np.sort(C, axis=1)  # (n, k)
    starts = np.concatenate(
        [np.zeros((n, 1), dtype=np.int64), (s[:, 1:] != s[:, :-1]).astype(np.int64)], axis=1
    )
    labels = np.cumsum(starts, axis=1)  # (n, k) in 0..k-1
    keys = (np.arange(n)[:, None] * k + labels).ravel()
    counts = np.bincount(keys, minlength=n * k).reshape(n, k)  # (n, k) cluster sizes (0 = unused)
    prop = counts / k
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(prop > 0, prop * np.log(np.where(prop > 0, prop, 1.0)), 0.0)
    return terms.sum(axis=1)


def largest_answer_cluster(C, answered) -> np.ndarray:
    """Per prompt, the number of generations in its largest cluster of *answered* generations.

    m_i = max_c |{j : C_ij = c and answered_ij}| (0 when no generation has an answer). A
    generation without an extractable answer belongs to no answer cluster: it never makes a
    prompt look consistent.

    Args:
        C: (n, k) integer cluster ids.  answered: (n, k) bool, the generation has an answer.
    Returns:
        (n,) int counts in [0, k].
    """
    C, A = np.asarray(C), np.asarray(answered, dtype=bool)
    if C.shape != A.shape or C.ndim != 2:
        raise UserError(
            f"cluster ids and the answered mask must be (n, k) of one shape, got {C.shape} and {A.shape}"
        )
    n, k = C.shape
    order = np.argsort(C, axis=1, kind="stable")
    s, a = np.take_along_axis(C, order, axis=1), np.take_along_axis(A, order, axis=1)  # (n, k)
    starts = np.concatenate(
        [np.zeros((n, 1), dtype=np.int64), (s[:, 1:] != s[:, :-1]).astype(np.int64)], axis=1
    )
    keys = (np.arange(n)[:, None] * k + np.cumsum(starts, axis=1)).ravel()
    counts = np.bincount(keys, weights=a.ravel().astype(np.float64), minlength=n * k).reshape(n, k)
    return counts.max(axis=1).astype(np.int64)


def data_map_flags(p, S, p_max: float = 0.1, s_min: float = -0.8, largest_answer=None) -> np.ndarray:
    """Data-map flag: prompts with low P(correct) yet consistent answers (suspect labels).

    flag_i = (p̂_i <= p_max) and (S_i >= s_min) [and m_i >= 2 with m_i the largest cluster of answered
    generations, :func:`largest_answer_cluster`: a prompt is a label-error candidate only through an
    answer the model gives repeatedly, never through generations without an answer; with k = 1
    nothing repeats, and a data map needs several generations anyway].

    Args:
        p: (n,) P(correct).  S: (n,) semantic consistency.
        p_max, s_min: thresholds (paper: 0.1 and −0.8).
        largest_answer: optional (n,) m_i; when given, prompts without a repeated answer are not flagged.
    Returns:
        (n,) bool.
    Paper: Zhang et al., Sec. 4 (18 GSM8K prompts flagged, 44% mislabelled or ambiguous).
    """
    p = np.asarray(p, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    if p.shape != S.shape:
        raise UserError(
            f"P(correct) and consistency must have the same shape, got {p.shape} and {S.shape}"
        )
    if not 0.0 <= p_max <= 1.0:
        raise UserError(f"p_max must lie in [0, 1], got {p_max}")
    if s_min > 0:
        raise UserError(f"s_min must be <= 0 (S = Σ Prop log Prop is never positive), got {s_min}")
    flags = (p <= p_max) & (S >= s_min)
    if largest_answer is not None:
        flags &= np.asarray(largest_answer) >= 2
    return flags
