"""Speed of the confidence sequence (engine/stats/sequential.py): updating it must never be the
bottleneck of a sequential run.

1. One round update: 256 new questions over 3 pairs (PairwiseCS, 3 models), at rounds 1..8 of a
   run on N = 14,042 (round 1 sees the whole grid; later rounds only the grid points that can still
   move the interval). Target <= 10 ms.
2. A full replay: confidence_sequence over all 14,042 questions for 20 seeds (the whole path to N,
   no early stop). Target <= 10 s on the 2-core machine.

Populations: coupled-like (70% d = 0, 10% -1, 20% +1) and independent-like (49% 0, 18% -1, 33% +1).
Wall-clock and process CPU time; the median over --rounds-reps fresh runs. Figures in
docs/BENCHMARKS.md.

    .venv/bin/python bench/bench_sequential.py
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

from engine.stats.sequential import PairwiseCS, confidence_sequence, question_order  # noqa: E402

SHAPES = {"coupled-like": (0.10, 0.70, 0.20), "independent-like": (0.18, 0.49, 0.33)}


def scores_for(shape: str, N: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """(N, k) 0/1 scores whose pairwise differences with model 0 have the shape's distribution."""
    p_minus, _, p_plus = SHAPES[shape]
    base = (rng.random(N) < 0.5).astype(float)
    out = [base]
    for _ in range(k - 1):
        u = rng.random(N)
        other = base.copy()
        other[(base == 1) & (u < 2 * p_plus)] = 0.0  # model 0 wins
        other[(base == 0) & (u < 2 * p_minus)] = 1.0  # model 0 loses
        out.append(other)
    return np.stack(out, axis=1)


def round_times(
    shape: str, N: int, rounds: int, reps: int, round_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    wall, cpu = np.zeros((reps, rounds)), np.zeros((reps, rounds))
    for r in range(reps):
        S = scores_for(shape, N, 3, np.random.default_rng(r))[question_order(N, r)]
        pc = PairwiseCS(3, N, alpha=0.05)
        for i in range(rounds):
            w0, c0 = time.perf_counter(), time.process_time()
            pc.update(S[i * round_size : (i + 1) * round_size])
            wall[r, i], cpu[r, i] = time.perf_counter() - w0, time.process_time() - c0
    return np.median(wall, axis=0) * 1e3, np.median(cpu, axis=0) * 1e3


def replay_time(shape: str, N: int, seeds: int) -> tuple[float, float]:
    p = np.array(SHAPES[shape])
    pop = np.repeat([-1.0, 0.0, 1.0], np.round(p * N).astype(int))[:N]
    pop = np.concatenate([pop, np.zeros(N - pop.size)])
    w0, c0 = time.perf_counter(), time.process_time()
    for s in range(seeds):
        confidence_sequence(pop[question_order(N, s)], N)
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--N", type=int, default=14042)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--rounds-reps", type=int, default=7)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args()
    N, rounds, reps, seeds = (600, 2, 1, 2) if a.smoke else (a.N, a.rounds, a.rounds_reps, a.seeds)
    print(f"One round = 256 questions x 3 pairs, N = {N:,}; median of {reps} runs (ms, wall / CPU)\n")
    print("| population | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + " |")
    print("|---|" + "---|" * rounds)
    for shape in SHAPES:
        w, c = round_times(shape, N, rounds, reps)
        print(
            f"| {shape} | " + " | ".join(f"{x:.1f} / {y:.1f}" for x, y in zip(w, c)) + " |", flush=True
        )
    print(f"\nFull replay: {seeds} seeds x {N:,} questions, one pair, whole path to N (s)\n")
    print("| population | wall | CPU |")
    print("|---|---|---|")
    for shape in SHAPES:
        w, c = replay_time(shape, N, seeds)
        print(f"| {shape} | {w:.2f} | {c:.2f} |", flush=True)


if __name__ == "__main__":
    main()
