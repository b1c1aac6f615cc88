"""Timing of the prompt-clustered bootstrap on the Chatbot Arena human data (docs/METHODS.md 7.2).

All 26,919 human comparisons (every model in the file), clusters = question_id, B resamples:
win-rates + average win-rates, BT/Davidson (batched MM), Elo (one pass over the rows, numpy over
B). Also the old row-level loop (winrates.bootstrap_ci) on a few resamples, extrapolated, for the
speed-up. Skips cleanly (exit 0, message) without ../shared/data/arena.

    .venv/bin/python bench/arena_cluster_bootstrap.py --resamples 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats import clustered as CL  # noqa: E402
from engine.stats import winrates as wr  # noqa: E402


def load(path: Path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    models = sorted({r["model_a"] for r in rows} | {r["model_b"] for r in rows})
    idx = {m: i for i, m in enumerate(models)}
    a = np.array([idx[r["model_a"]] for r in rows])
    b = np.array([idx[r["model_b"]] for r in rows])
    o = np.array(
        [
            wr.A_WINS if r["winner"] == "model_a" else wr.B_WINS if r["winner"] == "model_b" else wr.TIE
            for r in rows
        ]
    )
    q = np.array([r["question_id"] for r in rows], dtype=object)
    return a, b, o, q, models


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arena", default=str(ROOT.parent / "shared" / "data" / "arena"))
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--old-reps", type=int, default=3, help="row-level loop resamples to time (extrapolated)"
    )
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.smoke:  # synthetic Arena-layout data, few resamples
        from _smoke import synthetic_arena

        args.arena, args.resamples, args.old_reps = str(synthetic_arena()), 20, 1
    path = Path(args.arena) / "human.json"
    if not path.exists():
        print(f"skipped: {path} not found (needs ../shared/data/arena)")
        return 0
    a, b, o, q, models = load(path)
    k = len(models)
    codes, C, _ = CL.cluster_codes(q, a.size)
    print(f"{a.size} comparisons, {k} models, {C} prompts (clusters); B = {args.resamples}")
    rng = np.random.default_rng(args.seed)
    out = {}
    for name, fn in (
        ("win-rates", CL.winrate_cluster_bootstrap),
        ("BT/Davidson", CL.davidson_cluster_bootstrap),
        ("Elo", CL.elo_cluster_bootstrap),
    ):
        t0 = time.perf_counter()
        fn(a, b, o, k, rng, cluster=q, n_resamples=args.resamples)
        out[name] = time.perf_counter() - t0
        print(f"  {name:12s} cluster bootstrap, B = {args.resamples}: {out[name]:6.2f} s")
    bt = CL.davidson_cluster_bootstrap(
        a, b, o, k, np.random.default_rng(1), cluster=q, n_resamples=args.resamples
    )
    top = np.argsort(-bt["beta"])[:5]
    for i in top:
        print(
            f"    {models[i]:28s} beta {bt['beta'][i]:+.3f}  [{bt['beta_low'][i]:+.3f}, {bt['beta_high'][i]:+.3f}]"
        )
    t0 = time.perf_counter()
    wr.bootstrap_ci(
        lambda *x: wr.davidson_fit(*x)[0], a, b, o, k, np.random.default_rng(2), reps=args.old_reps
    )
    old_bt = (time.perf_counter() - t0) / args.old_reps * args.resamples
    t0 = time.perf_counter()
    wr.bootstrap_ci(wr.elo_ratings, a, b, o, k, np.random.default_rng(2), reps=args.old_reps)
    old_elo = (time.perf_counter() - t0) / args.old_reps * args.resamples
    print(
        f"  old row-level loop (winrates.bootstrap_ci), extrapolated from {args.old_reps} resamples to "
        f"{args.resamples}: BT {old_bt:.0f} s, Elo {old_elo:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
