"""Simulators with known truth for the product's evaluation designs (docs/METHODS.md section 7).

Pure functions of a passed-in ``np.random.Generator``; used by the tests (small) and the bench
scripts (large) to check that intervals cover and tests hold their size.

Family:

* :class:`JudgeDesign`            frozen config of the clustered judge design
* :func:`simulate_judge_design`   comparisons: prompts x repeats x modes x model pairs x both orders
* :func:`judge_design_truth`      exact win / tie probabilities (k, k) of that design, per mode
* :class:`BenchmarkDesign`        frozen config of a clustered benchmark (questions x repeats)
* :func:`simulate_benchmark`      (n, k) 0/1 score matrices of two models, coupled or independent
* :func:`benchmark_truth`         the exact accuracy difference Δ of that design

Judge design (all Gaussian, so the truth is exact). Model m's output on prompt p, repeat r, mode
``mo``:  ``y = q_m + u_pm + e_prm``, ``u_pm ~ N(0, prompt_sd²)`` (a prompt-by-model random effect:
the source of within-prompt correlation), ``e = gen_sd (sqrt(ρ) g_pr + sqrt(1−ρ) h_prm)`` with the
shared draw ``g_pr`` used only under coupled generation (ρ = ``coupling``; independent: ρ = 0).
The judge sees output X first and Y second: ``z = y_X − y_Y ± η + β + ε``, ``η ~ N(0, judge_sd²)``
shared by both orders of one judgement (sign follows the models), ``ε ~ N(0, order_sd²)`` per
order, ``β`` = position bias toward the first-shown output; verdict first-wins if ``z > t``,
second-wins if ``z < −t``, tie otherwise (t = ``tie_margin``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

A_WINS, B_WINS, TIE = 0, 1, 2
MODES = ("coupled", "independent")


@dataclass(frozen=True)
class JudgeDesign:
    """Clustered LLM-judge design (defaults: 100 prompts x 5 repeats, 4 models, both orders).

    With the defaults the judge gives the same model-level verdict in both orders about 85%
    of the time (position bias + order noise), as in the issue's measurement.
    """

    n_prompts: int = 100
    n_repeats: int = 5
    quality: tuple = (0.3, 0.1, 0.0, -0.2)
    prompt_sd: float = 0.6
    gen_sd: float = 0.5
    coupling: float = 0.6
    judge_sd: float = 0.3
    order_sd: float = 0.12
    position_bias: float = 0.1
    tie_margin: float = 0.1
    modes: tuple = MODES
    both_orders: bool = True


def _noise_sd(d: JudgeDesign, mode: str) -> float:
    """sd of (y_i − y_j + η + ε) given the models: the scale of the probit win probabilities."""
    rho = d.coupling if mode == "coupled" else 0.0
    var = 2 * d.prompt_sd**2 + 2 * (1 - rho) * d.gen_sd**2 + d.judge_sd**2 + d.order_sd**2
    return float(np.sqrt(var))


def judge_design_truth(d: JudgeDesign, mode: str) -> dict:
    """Exact win and tie probabilities of the judge design, both orders averaged.

    W_ij = ½ Σ_{s=±1} Φ((q_i − q_j + sβ − t)/σ),  T_ij = ½ Σ_s [Φ((t − μ_s)/σ) − Φ((−t − μ_s)/σ)],
    μ_s = q_i − q_j + sβ.  With one order only (``both_orders=False``, i shown first when i < j)
    the truth is the s = +1 term for i < j and s = −1 for i > j.

    Returns:
        dict with W (k, k) (P(i preferred over j), NaN diagonal), T (k, k), avg (k,) average
        win-rate (mean over the k − 1 opponents).
    """
    q = np.asarray(d.quality, float)
    k = q.size
    s = _noise_sd(d, mode)
    mu = q[:, None] - q[None, :]  # (k, k)
    t, beta = d.tie_margin, d.position_bias
    wins = [stats.norm.cdf((mu + sg * beta - t) / s) for sg in (1, -1)]
    ties = [
        stats.norm.cdf((t - (mu + sg * beta)) / s) - stats.norm.cdf((-t - (mu + sg * beta)) / s)
        for sg in (1, -1)
    ]
    if d.both_orders:
        W, T = (wins[0] + wins[1]) / 2, (ties[0] + ties[1]) / 2
    else:
        upper = np.triu(np.ones((k, k), bool), 1)
        W = np.where(upper, wins[0], wins[1])
        T = np.where(upper, ties[0], ties[1].T)
        T = np.where(upper, T, T.T)
    W = W.copy()
    np.fill_diagonal(W, np.nan)
    np.fill_diagonal(T, np.nan)
    return {"W": W, "T": T, "avg": np.nanmean(W, axis=1)}


def simulate_judge_design(d: JudgeDesign, rng: np.random.Generator, shuffle: bool = True) -> dict:
    """One data set of the clustered judge design (see module docstring).

    Rows: every prompt x repeat x mode x unordered pair (i < j) x order (both, or i first only).

    Args:
        d: the design.  rng: the randomness.  shuffle: put rows in random order (online Elo
            then sees them as an arrival stream, not sorted by prompt).
    Returns:
        dict of (n,) arrays: a (first shown), b (second shown), outcome (0 a wins, 1 b wins,
        2 tie), prompt, repeat, mode (index into d.modes), unit (one id per judgement: its two
        orders share it), order (0 = lower index first); and ``consistency`` (float: share of
        judgements with the same model-level verdict in both orders, NaN with one order).
    """
    q = np.asarray(d.quality, float)
    k, P, Rr, Mo = q.size, d.n_prompts, d.n_repeats, len(d.modes)
    ii, jj = np.triu_indices(k, 1)  # (npairs,)
    npair = ii.size
    u = rng.normal(0, d.prompt_sd, size=(P, 1, 1, k))  # prompt-by-model effect
    g = rng.normal(size=(P, Rr, 1, 1))  # shared generation noise (coupled only)
    h = rng.normal(size=(P, Rr, Mo, k))
    rho = np.array([d.coupling if m == "coupled" else 0.0 for m in d.modes])[None, None, :, None]
    y = q + u + d.gen_sd * (np.sqrt(rho) * g + np.sqrt(1 - rho) * h)  # (P, R, Mo, k)
    diff = (
        y[..., ii] - y[..., jj] + rng.normal(0, d.judge_sd, size=(P, Rr, Mo, npair))
    )  # (P, R, Mo, npair)
    n_ord = 2 if d.both_orders else 1
    # order 0: i first, z = diff + β + ε;  order 1: j first, z = −diff + β + ε
    sign = np.array([1.0, -1.0])[:n_ord]
    z = sign * diff[..., None] + d.position_bias + rng.normal(0, d.order_sd, size=diff.shape + (n_ord,))
    out = np.where(
        z > d.tie_margin, A_WINS, np.where(z < -d.tie_margin, B_WINS, TIE)
    )  # (P, R, Mo, npair, O)
    shape = out.shape
    idx = np.indices(shape)  # (5, P, R, Mo, npair, O)
    pair, order = idx[3], idx[4]
    a = np.where(order == 0, ii[pair], jj[pair])
    b = np.where(order == 0, jj[pair], ii[pair])
    unit = np.ravel_multi_index((idx[0], idx[1], idx[2], idx[3]), shape[:4])
    consistency = float("nan")
    if n_ord == 2:
        # model-level verdict: +1 i wins, −1 j wins, 0 tie; order 1 flips the sign
        v0 = np.where(out[..., 0] == A_WINS, 1, np.where(out[..., 0] == B_WINS, -1, 0))
        v1 = np.where(out[..., 1] == A_WINS, -1, np.where(out[..., 1] == B_WINS, 1, 0))
        consistency = float(np.mean(v0 == v1))
    rows = {
        "a": a,
        "b": b,
        "outcome": out,
        "prompt": idx[0],
        "repeat": idx[1],
        "mode": idx[2],
        "unit": unit,
        "order": order,
    }
    rows = {key: v.ravel().astype(np.int64) for key, v in rows.items()}
    if shuffle:
        perm = rng.permutation(rows["a"].size)
        rows = {key: v[perm] for key, v in rows.items()}
    rows["consistency"] = consistency
    return rows


@dataclass(frozen=True)
class BenchmarkDesign:
    """Clustered benchmark: question effects shared by both models, repeats, coupled or not.

    P(model m correct on question i) = Φ(a_m + u_i + v_im), u_i ~ N(0, question_sd²) (shared),
    v_im ~ N(0, model_sd²); repeat r scores 1{U < p}: coupled = one U_ir shared by both models,
    independent = one U per model.
    """

    n_questions: int = 200
    n_repeats: int = 5
    a: tuple = (0.3, 0.3)
    question_sd: float = 1.0
    model_sd: float = 0.5
    coupled: bool = True


def benchmark_truth(d: BenchmarkDesign) -> float:
    """Δ = E Φ(a_A + Z) − E Φ(a_B + Z), Z ~ N(0, s²), s² = question_sd² + model_sd²: Φ(a/sqrt(1+s²))
    each."""
    s = np.sqrt(1 + d.question_sd**2 + d.model_sd**2)
    return float(stats.norm.cdf(d.a[0] / s) - stats.norm.cdf(d.a[1] / s))


def simulate_benchmark(d: BenchmarkDesign, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Score matrices of two models under :class:`BenchmarkDesign`.

    Returns:
        A, B: (n_questions, n_repeats) float 0/1 scores.
    """
    n, k = d.n_questions, d.n_repeats
    u = rng.normal(0, d.question_sd, size=(n, 1))
    p = stats.norm.cdf(
        np.asarray(d.a, float)[None, :] + u + rng.normal(0, d.model_sd, size=(n, 2))
    )  # (n, 2)
    U = rng.random((n, k, 1 if d.coupled else 2))  # (n, k, 1|2)
    S = (U < p[:, None, :]).astype(float)  # (n, k, 2)
    return S[..., 0], S[..., 1]
