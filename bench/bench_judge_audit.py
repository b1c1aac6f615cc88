"""Judge audit speed (docs/METHODS.md 9.2; target: 10,000 units with 1,000 bootstrap resamples <= 5 s).

A simulated run (engine.analysis.audit_sim: k = 5 models, every pair on 1,000 prompts = 10,000 units,
judged in both orders; 1,000 human labels, 20% doubly labelled; a second judge) timed two ways:
  frames  engine.analysis.judge_audit.audit_units on in-memory frames (the statistics alone)
  store   engine.analysis.judge_audit.judge_audit from a DuckDB file (reads of 40,000 verdict rows
          of two judges and the label set + the statistics: what ``engine judge-audit`` does)
Median of --reps runs, wall time.

    .venv/bin/python bench/bench_judge_audit.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _smoke import SMOKE_HELP  # noqa: E402

RUN = "bench-run"
PARSED = {("a", "ab"): "A", ("b", "ab"): "B", ("a", "ba"): "B", ("b", "ba"): "A"}


def store_run(db: Path, units, labels, other) -> None:
    """The simulated run as stored rows: a runs row, verdicts of judges j1 / j2, a label set naming the run."""
    import pandas as pd

    from engine.store import comparisons as SC
    from engine.store import runs as RS
    from engine.store.db import insert_df, transaction
    from engine.store.verdicts import COLUMNS

    with transaction(db) as con:
        RS.create_run(
            con, RUN, "ds", {"models": sorted(set(units.model_a))}, "v", "token_id", [], len(units)
        )
    frames = []
    for judge, u in (("j1", units), ("j2", other)):
        for order, col in (("ab", "w_ab"), ("ba", "w_ba")):
            w = np.array(["a", "b", "tie"], object)[u[col].to_numpy()]
            parsed = [PARSED.get((x, order), "tie") for x in w]
            frames.append(
                u[["prompt_id", "repeat", "mode", "model_a", "model_b"]].assign(
                    run_id=RUN,
                    judge=judge,
                    presented=order,
                    judge_prompt_hash="h",
                    raw=None,
                    parsed=parsed,
                    winner=w,
                )
            )
    v = pd.concat(frames, ignore_index=True)
    for c in COLUMNS:
        if c not in v:
            v[c] = None
    with transaction(db) as con:
        insert_df(con, "judgments", v[list(COLUMNS)].astype(object), COLUMNS)
    SC.write_set(db, labels.assign(judge_winner=None), "bench-labels", "labels", {"run_id": RUN}, False)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--prompts", type=int, default=1000, help="prompts (x 10 pairs of 5 models = units)")
    ap.add_argument("--labels", type=int, default=1000)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--keep-db",
        metavar="PATH",
        help="also store the simulated run in this new database file (run "
        "'bench-run', judges j1 / j2, set 'bench-labels'; docs/JUDGE_AUDIT.md)",
    )
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args()
    if a.smoke:
        a.prompts, a.labels, a.boot, a.reps = 30, 60, 50, 1
    from engine.analysis.audit_sim import simulated_run
    from engine.analysis.judge_audit import audit_units, judge_audit

    units, labels = simulated_run(a.prompts, 5, a.labels, np.random.default_rng(0))
    other = units.copy()
    flip = np.random.default_rng(1).random(len(other)) < 0.2
    other.loc[flip, ["w_ab", "w_ba", "judge"]] = 2
    times = {"frames": [], "store": []}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        store_run(db, units, labels, other)
        for _ in range(a.reps):
            t = time.perf_counter()
            audit_units(RUN, "j1", units, labels, n_boot=a.boot, panel={"j1": units, "j2": other})
            times["frames"].append(time.perf_counter() - t)
            t = time.perf_counter()
            res = judge_audit(db, RUN, "j1", n_boot=a.boot)
            times["store"].append(time.perf_counter() - t)
    if a.keep_db:
        if Path(a.keep_db).exists():
            raise SystemExit(f"--keep-db: {a.keep_db} exists; give a new file")
        store_run(Path(a.keep_db), units, labels, other)
        print(f"stored the simulated run 'bench-run' in {a.keep_db}")
    print(
        f"judge audit: {len(units):,} units, {res.n_audited:,} with both labels, {a.boot} resamples, "
        f"judges {res.judges}"
    )
    for k, v in times.items():
        print(f"  {k:<7} median {np.median(v):.2f} s  (runs: {', '.join(f'{x:.2f}' for x in v)})")
    print(
        f"  agreement {res.agreement.estimate:.3f} [{res.agreement.lower:.3f}, {res.agreement.upper:.3f}]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
