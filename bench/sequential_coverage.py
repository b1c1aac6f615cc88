"""Validity of the anytime-valid confidence sequence, shown (docs/METHODS.md 8.2-8.3).

Finite populations of N paired differences d_i (N = 200, 1,000, 14,042) in four shapes:
coupled-like (70% d = 0, 10% -1, 20% +1), independent-like (two independent models right 60% and
45% of the time: d in {-1, 0, 1} with 0.18 / 0.49 / 0.33), skewed (97% 0, 3% +1: rare wins) and
all-equal (every d = 0). For each population and alpha in {0.05, 0.1}: over random orders, the rate
at which the CS ever misses Delta_N on its path to N (target <= alpha, Monte Carlo SE
sqrt(p (1 - p) / reps)); on the same paths the rate at which a t interval re-checked every 10
questions ever misses (the invalid procedure); and the median stopping time of the rule "decided"
(N where it never fires). Printed as a markdown table (docs/REPRODUCTION.md, "Sequential
evaluation: coverage").

    .venv/bin/python bench/sequential_coverage.py --reps 400 --reps-large 100
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats.sequential import (  # noqa: E402
    StopRule,
    confidence_sequence,
    first_stop,
    question_order,
)

SHAPES = {  # P(d = -1), P(d = 0), P(d = +1)
    "coupled-like": (0.10, 0.70, 0.20),
    "independent-like": (0.18, 0.49, 0.33),
    "skewed": (0.0, 0.97, 0.03),
    "all-equal": (0.0, 1.0, 0.0),
}
LOOK_EVERY = 10
DECIDED = StopRule(decided=True)


def population(N: int, shape: str, rng: np.random.Generator) -> np.ndarray:
    """Exactly round(p * N) of each value (the population is fixed; only the order is random)."""
    p = np.array(SHAPES[shape])
    counts = np.floor(p * N).astype(int)
    counts[1] += N - counts.sum()
    return rng.permutation(np.repeat([-1.0, 0.0, 1.0], counts))


def naive_t_misses(d: np.ndarray, target: float, alpha: float) -> bool:
    """Does the fixed-n t interval, re-checked every LOOK_EVERY questions, ever exclude the target?"""
    n = np.arange(LOOK_EVERY, d.size + 1, LOOK_EVERY)
    s1, s2 = np.cumsum(d)[n - 1], np.cumsum(d * d)[n - 1]
    mean = s1 / n
    var = np.maximum(s2 - n * mean**2, 0.0) / (n - 1)
    half = sps.t.ppf(1 - alpha / 2, n - 1) * np.sqrt(var / n)
    return bool(np.any(np.abs(mean - target) > half + 1e-12))


def one_cell(N: int, shape: str, alpha: float, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    pop = population(N, shape, rng)
    target = float(pop.mean())
    miss_cs = miss_t = 0
    stops = []
    for r in range(reps):
        d = pop[question_order(N, seed * 100_003 + r)]
        lo, up = confidence_sequence(d, N, alpha=alpha)
        miss_cs += bool(np.any((lo > target + 1e-12) | (up < target - 1e-12)))
        miss_t += naive_t_misses(d, target, alpha)
        n = first_stop(DECIDED, lo, up)
        stops.append(N if n is None else n)
    return {
        "N": N,
        "shape": shape,
        "alpha": alpha,
        "reps": reps,
        "delta_N": target,
        "cs_miss": miss_cs / reps,
        "t_miss": miss_t / reps,
        "median_stop": float(np.median(stops)),
        "decided_before_N": float(np.mean(np.array(stops) < N)),
    }


def fmt(p: float, reps: int) -> str:
    return f"{p:.3f} ± {np.sqrt(p * (1 - p) / reps):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=400, help="random orders per cell with N <= 1,000")
    ap.add_argument("--reps-large", type=int, default=100, help="random orders per cell with N = 14,042")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args()
    sizes, alphas = ((60,), (0.1,)) if a.smoke else ((200, 1000, 14042), (0.05, 0.1))
    reps_small, reps_large = (8, 8) if a.smoke else (a.reps, a.reps_large)
    print(
        "| N | population | Δ_N | α | orders | CS ever misses Δ_N | t re-checked every 10 ever misses "
        "| median stop (decided) | decided before N |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for N in sizes:
        for shape in SHAPES:
            for alpha in alphas:
                reps = reps_large if N > 1000 else reps_small
                c = one_cell(N, shape, alpha, reps, a.seed + N)
                print(
                    f"| {N:,} | {shape} | {c['delta_N']:+.3f} | {alpha:g} | {reps} | {fmt(c['cs_miss'], reps)} | "
                    f"{fmt(c['t_miss'], reps)} | {c['median_stop']:g} | {c['decided_before_N']:.2f} |",
                    flush=True,
                )
    print(f"\n{time.perf_counter() - t0:.0f} s; Monte Carlo SE = sqrt(p (1 - p) / orders)")


if __name__ == "__main__":
    main()
