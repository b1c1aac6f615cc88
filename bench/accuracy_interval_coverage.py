"""Exact coverage of per-model accuracy intervals for one 0/1 score per question (docs/INTERVALS.md;
engine.stats.multigen.proportion_interval).

With n questions drawn independently and one 0/1 score each, the count of correct answers is
Binomial(n, p). An interval rule maps each count x = 0..n to an interval I(x), so its coverage at a
true accuracy p is an exact sum, no simulation:

    C(p) = Σ_x Binom(x; n, p) · 1{p ∈ I(x)}

C is piecewise smooth and jumps at the intervals' ends, so its infimum over p ∈ (0, 1) is taken over a
uniform grid plus both sides of every end (±1e-9). Rules compared, 95% unless --level says otherwise:

* ``product``:        engine.stats.multigen.proportion_interval with k = 1 (Clopper-Pearson)
* ``t``:              μ̂ ± t_{n−1} sd/√n intersected with [0, 1], Clopper-Pearson at x = 0 or n (the
  product's rule before: still its rule for repeats and partial credit)
* ``wilson_neff``:    Wilson at the clustered effective n, p̂(1 − p̂)/SE² with the cluster sandwich SE
  (engine.stats.winrates.cluster_wilson and n_eff_clustered, the win-rate fast form; n at x = 0, n)
* ``agresti_coull``:  p̃ ± z √(p̃(1 − p̃)/ñ), ñ = n + z², p̃ = (x + z²/2)/ñ, intersected with [0, 1]
* ``jeffreys``:       Beta(x + ½, n − x + ½) quantiles (0 at x = 0, 1 at x = n)
* ``mid_p``:          the mid-p exact interval (half the probability of the observed count)
* ``clopper_pearson``: engine.stats.multigen.clopper_pearson (the product's, written as a check)

    .venv/bin/python bench/accuracy_interval_coverage.py --questions 8 20 40
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import optimize
from scipy import stats as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats.multigen import clopper_pearson, proportion_interval  # noqa: E402
from engine.stats.winrates import cluster_wilson, n_eff_clustered  # noqa: E402


def _scores(x: int, n: int) -> np.ndarray:
    return np.r_[np.ones(x), np.zeros(n - x)]


def t_interval(x: int, n: int, level: float) -> tuple[float, float]:
    y = _scores(x, n)
    if x in (0, n):  # the exact bound the product already used at an all-0 / all-1 score
        return clopper_pearson(x, n, level)
    mu, se = y.mean(), y.std(ddof=1) / np.sqrt(n)
    tq = st.t.ppf(0.5 + level / 2, n - 1)
    return max(mu - tq * se, 0.0), min(mu + tq * se, 1.0)


def wilson_neff(x: int, n: int, level: float) -> tuple[float, float]:
    p = x / n
    se = np.sqrt(((_scores(x, n) - p) ** 2).sum()) / n  # cluster sandwich SE, one score per cluster
    lo, hi = cluster_wilson(p, n_eff_clustered(p, se, n), level)
    return float(lo), float(hi)


def agresti_coull(x: int, n: int, level: float) -> tuple[float, float]:
    z = st.norm.ppf(0.5 + level / 2)
    nt = n + z**2
    pt = (x + z**2 / 2) / nt
    half = z * np.sqrt(pt * (1 - pt) / nt)
    return max(pt - half, 0.0), min(pt + half, 1.0)


def jeffreys(x: int, n: int, level: float) -> tuple[float, float]:
    a = 1 - level
    lo = 0.0 if x == 0 else float(st.beta.ppf(a / 2, x + 0.5, n - x + 0.5))
    hi = 1.0 if x == n else float(st.beta.ppf(1 - a / 2, x + 0.5, n - x + 0.5))
    return lo, hi


def mid_p(x: int, n: int, level: float) -> tuple[float, float]:
    """low: P(X > x) + ½P(X = x) = α/2;  high: P(X < x) + ½P(X = x) = α/2."""
    a = 1 - level

    def upper_tail(p: float) -> float:
        return st.binom.sf(x, n, p) + 0.5 * st.binom.pmf(x, n, p) - a / 2

    def lower_tail(p: float) -> float:
        return st.binom.cdf(x - 1, n, p) + 0.5 * st.binom.pmf(x, n, p) - a / 2

    lo = 0.0 if x == 0 else optimize.brentq(upper_tail, 1e-12, 1 - 1e-12)
    hi = 1.0 if x == n else optimize.brentq(lower_tail, 1e-12, 1 - 1e-12)
    return float(lo), float(hi)


RULES = {
    "product": lambda x, n, level: proportion_interval(_scores(x, n), 1, level),
    "t": t_interval,
    "wilson_neff": wilson_neff,
    "agresti_coull": agresti_coull,
    "jeffreys": jeffreys,
    "mid_p": mid_p,
    "clopper_pearson": clopper_pearson,
}


def intervals(rule, n: int, level: float) -> np.ndarray:
    """(n + 1, 2): the interval the rule gives at each count x = 0..n."""
    return np.array([rule(x, n, level) for x in range(n + 1)], dtype=np.float64)


def coverage(ivals: np.ndarray, p: np.ndarray) -> np.ndarray:
    """C(p) = Σ_x Binom(x; n, p) 1{p ∈ I(x)} for each p (exact)."""
    n = ivals.shape[0] - 1
    pmf = st.binom.pmf(np.arange(n + 1)[:, None], n, p[None, :])  # (n + 1, P)
    inside = (ivals[:, :1] <= p[None, :]) & (p[None, :] <= ivals[:, 1:])
    return (pmf * inside).sum(axis=0)


def probe_points(ivals: np.ndarray, grid: int) -> np.ndarray:
    """A uniform grid on (0, 1) and both sides of every interval end: where C(p) takes its infimum."""
    ends = ivals.ravel()
    near = np.concatenate([ends - 1e-9, ends + 1e-9])
    p = np.concatenate([np.linspace(0, 1, grid + 2)[1:-1], near])
    return np.unique(p[(p > 0) & (p < 1)])


def worst_case(rule, n: int, level: float, grid: int) -> dict:
    ivals = intervals(rule, n, level)
    p = probe_points(ivals, grid)
    c = coverage(ivals, p)
    i = int(np.argmin(c))
    uniform = np.linspace(0, 1, grid + 2)[1:-1]
    return {
        "min": float(c[i]),
        "at_p": float(p[i]),
        "mean": float(coverage(ivals, uniform).mean()),  # average coverage over p uniform on (0, 1)
        "width_half": float(np.diff(ivals[n // 2])[0]),  # the interval's width at x = n/2
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, nargs="+", default=[8, 20, 40])
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--grid", type=int, default=20_000, help="uniform points of p (plus every end)")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args(argv)
    if a.smoke:
        a.questions, a.grid = [8], 200
    print(f"exact coverage at level {a.level}, one 0/1 score per question; min over p in (0, 1)")
    print(f"{'rule':>16} {'n':>4} {'min':>7} {'at p':>7} {'mean':>7} {'width at n/2':>13}")
    for n in a.questions:
        for name, rule in RULES.items():
            r = worst_case(rule, n, a.level, a.grid)
            print(
                f"{name:>16} {n:>4} {r['min']:7.4f} {r['at_p']:7.4f} {r['mean']:7.4f} "
                f"{r['width_half']:13.4f}"
            )


if __name__ == "__main__":
    main()
