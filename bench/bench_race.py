"""Speed of the racing core (engine/stats/racing.py): one round of 256 questions over 30 models
(435 pairs), every pair active (the worst case: nobody has left yet).

Timed: the screen alone (every pair's log-capital at the two grid points next to 0, vectorised
over pairs); a whole round of :meth:`Race.update` with ``eliminate=False`` (the screen plus the
goal's decisions, each confirmed by the pair's exact SequentialCS, kept incrementally); and a
whole race (goal best) over a 30-model population to its end, for the record.

    .venv/bin/python bench/bench_race.py            # figures: docs/BENCHMARKS.md, "Racing: update speed"
    .venv/bin/python bench/bench_race.py --smoke
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

from engine.stats.racing import PointScreen, Race, race_scores, round_ends  # noqa: E402
from engine.stats.sequential import pair_alpha, pairs_of, question_order  # noqa: E402


def population(N: int, k: int, seed: int) -> np.ndarray:
    """Coupled-like 0/1 scores, accuracies 0.3..0.7 (one shared uniform per question)."""
    rng = np.random.default_rng(seed)
    acc = np.linspace(0.3, 0.7, k)
    return (rng.random((N, 1)) < acc[None] + rng.normal(0, 0.05, (N, k))).astype(float)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--round", type=int, default=256)
    ap.add_argument("--N", type=int, default=14042)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args(argv)
    if a.smoke:
        a.k, a.round, a.N, a.repeat = 6, 32, 400, 1
    S = population(a.N, a.k, 0)
    pairs = pairs_of(a.k)
    i, j = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    d = S[:, i] - S[:, j]
    rows = []
    for t0 in (0, a.round, 4 * a.round):

        def screen(t0=t0):
            sc = PointScreen(a.N, pair_alpha(0.05, a.k), np.zeros((len(pairs), 1)))
            if t0:
                sc.update(np.arange(len(pairs)), d[:t0])
            t = time.perf_counter()
            sc.update(np.arange(len(pairs)), d[t0 : t0 + a.round])
            return time.perf_counter() - t

        def round_(t0=t0):
            race = Race(a.k, a.N, "best", 0.05, eliminate=False)
            if t0:
                race.update(S[:t0])
            t = time.perf_counter()
            race.update(S[t0 : t0 + a.round])
            return time.perf_counter() - t

        rows.append((t0, min(screen() for _ in range(a.repeat)), min(round_() for _ in range(a.repeat))))
    t = time.perf_counter()
    race, rounds = race_scores(S, question_order(a.N, 0), "best", 0.05)
    whole = time.perf_counter() - t
    slowest = (0.0, 0, 0)  # the slowest round of an eliminating race: (seconds, its end, models leaving)
    live, order, start = Race(a.k, a.N, "best", 0.05), question_order(a.N, 0), 0
    for end in round_ends(a.N):
        t = time.perf_counter()
        left = live.update(S[order[start:end]])
        slowest = max(slowest, (time.perf_counter() - t, end, len(left)))
        start = end
        if live.done:
            break
    print(
        f"racing core: k = {a.k} models ({len(pairs)} pairs), rounds of {a.round} questions, N = {a.N:,}"
    )
    print("| questions before the round | screen (s) | Race.update, whole round (s) |\n|---|---|---|")
    for t0, s, r in rows:
        print(f"| {t0:,} | {s:.3f} | {r:.3f} |")
    print(
        f"\nslowest round of the race: {slowest[0]:.3f} s (ending at question {slowest[1]:,}; "
        f"{slowest[2]} models left in it, each confirmed by its pair's exact CS)"
    )
    print(
        f"whole race (goal best, default rounds): {whole:.2f} s, {rounds} rounds, {race.t:,} questions, "
        f"{int(race.answered.sum()):,} generations vs {a.k * race.t:,} with every model"
    )


if __name__ == "__main__":
    main()
