"""Validity and cost of racing many models, shown (docs/METHODS.md 8.4).

Finite populations with known full-run differences: k models (10, 20 or 30) answer N questions
once; model m is right on question i when u < sigmoid(θ_m − b_i), with question difficulties
b_i ~ N(0, 1.5²), model-specific effects ε_mi ~ N(0, 0.5²) in the logit, and accuracies spread over 0.3-0.7 (θ evenly spaced on the logit scale), the top
``--ties`` models tied (the same θ, and then exactly the same number of right answers, by flipping
a few of their answers: several true best models). Coupled: one u per question shared by every
model (the Gumbel-max coupling of a binary outcome: most paired differences are 0); independent:
one u per model and question. The population (N × k scores) is fixed; each replicate draws a new
population and a random question order, and races it with goal ``best`` at level α.

Reported per (k, mode, α): the family's whole-path miss rate (some pair's CS misses its Δ_N at some
time while it is updated, or frozen; an empty A_t counts as a miss), the rate at which a true best
model (one with the highest full-run accuracy) is eliminated (target ≤ α, Monte Carlo SE
sqrt(p (1 − p) / reps)), and the generations spent: the race, 8.3's joint stop for the same goal
(every model until the best is identified: k · n_stop) and the fixed run (k · N). Markdown table
for docs/REPRODUCTION.md, "Racing many models: validity and cost".

    .venv/bin/python bench/race_coverage.py --reps 100            # about 40 minutes on 2 busy cores
    .venv/bin/python bench/race_coverage.py --smoke
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats.racing import race_scores  # noqa: E402
from engine.stats.sequential import pairs_of, question_order  # noqa: E402


def population(k: int, N: int, ties: int, coupled: bool, rng: np.random.Generator) -> np.ndarray:
    """(N, k) 0/1 scores of one finite population (see the module docstring); models in random
    column order, so that no rule can profit from the index."""
    lo, hi = np.log(0.3 / 0.7), np.log(0.7 / 0.3)
    theta = np.linspace(lo, hi, k - ties + 1)
    theta = np.concatenate([theta[:-1], np.full(ties, theta[-1])])
    b = rng.normal(0.0, 1.5, N)
    eps = rng.normal(0.0, 0.5, (N, k))  # model-specific question effects: tied models still differ
    p = 1.0 / (1.0 + np.exp(-(theta[None, :] - b[:, None] + eps)))
    u = rng.random((N, 1)) if coupled else rng.random((N, k))
    S = (u < p).astype(float)
    top = np.arange(k - ties, k)
    target = int(S[:, top[0]].sum())
    for m in top[1:]:  # the tied models get exactly the first one's number of right answers
        have = int(S[:, m].sum())
        flip = np.flatnonzero(S[:, m] == (1.0 if have > target else 0.0))
        S[rng.choice(flip, abs(have - target), replace=False), m] = 0.0 if have > target else 1.0
    return S[:, rng.permutation(k)]


def one_race(S: np.ndarray, alpha: float, seed: int) -> dict:
    N, k = S.shape
    truth = np.array([np.mean(S[:, i] - S[:, j]) for i, j in pairs_of(k)])
    order = question_order(N, seed)
    race, _ = race_scores(S, order, "best", alpha, truth=truth)
    joint, _ = race_scores(S, order, "best", alpha, eliminate=False)
    acc = S.mean(axis=0)
    best = np.flatnonzero(acc == acc.max())
    n_stop = joint.t if joint.reason == "decided" else N
    return {
        "family_miss": bool(not np.all(race.covered())),
        "best_eliminated": any(race.status[b] == "eliminated" for b in best),
        "race": int(race.answered.sum()),
        "joint": k * n_stop,
        "fixed": k * N,
        "decided": race.reason == "decided",
    }


def cell(k: int, N: int, ties: int, coupled: bool, alpha: float, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rows = [one_race(population(k, N, ties, coupled, rng), alpha, seed * 7919 + r) for r in range(reps)]

    def rate(key):
        p = float(np.mean([r[key] for r in rows]))
        return p, float(np.sqrt(p * (1 - p) / reps))

    return {
        "k": k,
        "N": N,
        "mode": "coupled" if coupled else "independent",
        "alpha": alpha,
        "reps": reps,
        "family_miss": rate("family_miss"),
        "best_eliminated": rate("best_eliminated"),
        "race": float(np.median([r["race"] for r in rows])),
        "joint": float(np.median([r["joint"] for r in rows])),
        "fixed": float(rows[0]["fixed"]),
        "decided": float(np.mean([r["decided"] for r in rows])),
    }


def markdown(cells: list[dict]) -> str:
    head = (
        "| k | N | mode | α | reps | family whole-path miss (± MC SE) | true best eliminated (± MC SE) "
        "| race: median generations | 8.3 joint stop (k · n_stop) | fixed (k · N) | race / fixed | "
        "race / joint stop | one model left |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for c in cells:
        fm, be = c["family_miss"], c["best_eliminated"]
        lines.append(
            f"| {c['k']} | {c['N']:,} | {c['mode']} | {c['alpha']:g} | {c['reps']} | "
            f"{fm[0]:.3f} ± {fm[1]:.3f} | {be[0]:.3f} ± {be[1]:.3f} | {c['race']:,.0f} | "
            f"{c['joint']:,.0f} | {c['fixed']:,.0f} | {c['race'] / c['fixed']:.1%} | "
            f"{c['race'] / c['joint']:.1%} | {c['decided']:.0%} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100, help="populations (one random order each) per cell")
    ap.add_argument("--N", type=int, default=1000, help="questions per population")
    ap.add_argument("--k", default="10,20,30", help="numbers of models, comma-separated")
    ap.add_argument("--ties", type=int, default=3, help="models tied at the top")
    ap.add_argument("--alpha", default="0.05", help="levels, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args(argv)
    ks = [int(v) for v in a.k.split(",")]
    alphas = [float(v) for v in a.alpha.split(",")]
    if a.smoke:
        a.reps, a.N, ks, alphas = 3, 200, [10], [0.1]
    t0 = time.perf_counter()
    cells = []
    for k in ks:
        for coupled in (True, False):
            for alpha in alphas:
                cells.append(cell(k, a.N, a.ties, coupled, alpha, a.reps, a.seed + k))
                print(
                    f"# k={k} {'coupled' if coupled else 'independent'} alpha={alpha}: "
                    f"{time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    print(markdown(cells))
    print(f"\n{time.perf_counter() - t0:.0f} s; reps {a.reps}, N {a.N}, ties {a.ties}, seed {a.seed}")


if __name__ == "__main__":
    main()
