"""Accuracy rank-sets (``accuracy-ranks``, engine.analysis.accuracy_ranks) with few questions:
simultaneous coverage of the max-t rank-sets under the normal calibration (Z ~ N(0, Sigma_hat),
Sigma_hat = Cov(M)/Q treated as known; the product's choice before) and the wild cluster
bootstrap-t (questions as clusters, Rademacher weights, Sigma re-estimated per draw; the default
now), on the same data sets and the same alpha (rank_accuracies with each calibration).

Data (engine.stats.simulate.BenchmarkDesign's model, k models): P(model m correct on question i) =
Phi(a_m + u_i + v_im), u_i ~ N(0, 1) shared by the models, v_im ~ N(0, 0.5^2); each of R repeats
scores 1{U < p} with one U per (question, repeat) shared by the models (coupled generation).
True accuracy theta_m = Phi(a_m / sqrt(1 + 1 + 0.25)). Designs: ``tied`` (every a_m = 0: the
least-favourable configuration, where any separated pair is an error) and ``spread`` (a = 0, 0.1,
0.2, 0.3: neighbours about 0.03 apart). MC SE of a coverage p over N data sets: sqrt(p (1 - p) / N).

    .venv/bin/python bench/accuracy_ranks_coverage.py --reps 400 --draws 2000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.analysis.accuracy_ranks import rank_accuracies  # noqa: E402
from engine.stats import ranking as R  # noqa: E402

DESIGNS = {"tied": (0.0, 0.0, 0.0, 0.0), "spread": (0.0, 0.1, 0.2, 0.3)}
QUESTION_SD, MODEL_SD = 1.0, 0.5


def accuracy_matrix(Q: int, repeats: int, a, rng: np.random.Generator) -> np.ndarray:
    """(Q, k) per-question mean scores over ``repeats`` coupled repeats (the matrix accuracy-ranks reads)."""
    a = np.asarray(a, float)
    p = stats.norm.cdf(
        a[None, :] + rng.normal(0, QUESTION_SD, (Q, 1)) + rng.normal(0, MODEL_SD, (Q, a.size))
    )
    U = rng.random((Q, repeats, 1))  # one uniform per (question, repeat), shared by the models
    return (U < p[:, None, :]).mean(axis=1)  # (Q, k)


def true_theta(a) -> np.ndarray:
    return stats.norm.cdf(np.asarray(a, float) / np.sqrt(1 + QUESTION_SD**2 + MODEL_SD**2))


def run(design: str, Q: int, repeats: int, alphas, reps: int, n_draws: int, seed: int) -> dict:
    """Coverage and mean size per (calibration, alpha) over ``reps`` data sets (same data for both)."""
    rng = np.random.default_rng([seed, Q, repeats, list(DESIGNS).index(design)])
    tl, tu = R.true_ranksets(true_theta(DESIGNS[design]))
    out = {(cal, a): [] for cal in ("normal", "wild") for a in alphas}
    for _ in range(reps):
        M = accuracy_matrix(Q, repeats, DESIGNS[design], rng)
        for a in alphas:
            for cal in ("normal", "wild"):  # the product's function (wild: its default here)
                _, _, rs = rank_accuracies(M, a, rng, n_draws, calibration=cal)
                out[(cal, a)].append(
                    (
                        bool(R.rankset_covers(rs["lower"], rs["upper"], tl, tu)),
                        float(R.rankset_size(rs["lower"], rs["upper"])),
                    )
                )
    return out


def cell(rows) -> str:
    c = np.array([r[0] for r in rows], float)
    s = np.array([r[1] for r in rows], float)
    return f"{c.mean():.3f} ± {np.sqrt(c.mean() * (1 - c.mean()) / len(c)):.3f}, {s.mean():.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--questions", type=int, nargs="+", default=[40])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:
        args.reps, args.draws, args.questions = 5, 200, [12]
    alphas = (0.05, 0.1)
    print(
        f"k = 4 models, {args.repeats} repeats, {args.reps} data sets, {args.draws} draws; "
        "cells: coverage ± MC SE, mean size"
    )
    print("| design | questions | alpha | normal calibration | wild bootstrap-t |")
    print("|---|---|---|---|---|")
    t0 = time.perf_counter()
    for design in args.designs:
        for Q in args.questions:
            res = run(design, Q, args.repeats, alphas, args.reps, args.draws, args.seed)
            for a in alphas:
                print(
                    f"| {design} | {Q} | {a:g} | {cell(res[('normal', a)])} | {cell(res[('wild', a)])} |"
                )
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
