"""Concurrent readers and writers (tests/test_store_concurrency.py): a real generation on the packaged SmolLM2-135M
while dashboard-like readers hold the database in a loop, optionally with a second writer.

Each reader process loops: open ``store.reader`` (read-only), run a query, hold the file ``--hold``
seconds, close, pause ``--gap`` seconds. The second writer loops: one short ``store.transaction``,
then ``--writer-gap`` seconds. The generation runs as ``python -m engine generate`` with
``--batch-size`` small so that it writes many chunks. Reported: wall time, seconds per unit,
each process's connection waits (from COUPLED_EVAL_LOCK_LOG where the code under test writes it),
reader/writer loop counts and failures.

    python bench/bench_concurrency.py --code . --readers 3 --second-writer      # this checkout
    python bench/bench_concurrency.py --code /path/to/older/checkout ...        # before/after
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

READER = r"""
import sys, time, json
from engine import store
db, hold, gap, stop = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
import os
n, fails, waits = 0, 0, []
while not os.path.exists(stop):
    t0 = time.monotonic()
    try:
        with store.reader(db) as con:
            waits.append(time.monotonic() - t0)
            con.execute("SELECT count(*) FROM generations").fetchone()
            time.sleep(hold)
        n += 1
    except Exception as exc:
        fails += 1
        print("reader:", type(exc).__name__, str(exc)[:200], file=sys.stderr)
    time.sleep(gap)
print(json.dumps({"loops": n, "fails": fails, "waits": waits}))
"""

WRITER = r"""
import sys, time, json, os
from engine import store
db, gap, stop = sys.argv[1], float(sys.argv[2]), sys.argv[3]
n, fails, waits = 0, 0, []
while not os.path.exists(stop):
    t0 = time.monotonic()
    try:
        with store.transaction(db) as con:
            waits.append(time.monotonic() - t0)
            con.execute("INSERT OR REPLACE INTO meta VALUES ('bench_writer', ?)", [str(n)])
        n += 1
    except Exception as exc:
        fails += 1
        print("writer:", type(exc).__name__, str(exc)[:200], file=sys.stderr)
    time.sleep(gap)
print(json.dumps({"loops": n, "fails": fails, "waits": waits}))
"""

# The generation's write pattern without the model (so that CPU load from the model does not hide
# the store's cost): compute for --compute-s, then one transaction per chunk of --chunk units.
SYNTH = r"""
import sys, time, json
import pandas as pd
from engine import store
db, n_chunks, chunk, compute_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
waits, fails, t_start = [], 0, time.monotonic()
for c in range(n_chunks):
    time.sleep(compute_s)
    df = pd.DataFrame({"run_id": "synth", "model": "m", "prompt_id": [f"p{c}-{k}" for k in range(chunk)],
                       "repeat": 0, "mode": "coupled", "seed": 1, "text": "x" * 200, "finish_reason": "eos",
                       "n_tokens": 8})
    t0 = time.monotonic()
    try:
        with store.transaction(db) as con:
            waits.append(time.monotonic() - t0)
            store.insert_df(con, "generations", df, list(df.columns))
    except Exception as exc:
        fails += 1
        waits.append(time.monotonic() - t0)
        print("chunk:", type(exc).__name__, str(exc)[:200], file=sys.stderr)
t0 = time.monotonic()
try:
    with store.transaction(db) as con:  # the run's final status write
        con.execute("INSERT OR REPLACE INTO meta VALUES ('synth_status', 'done')")
    final_ok = True
except Exception as exc:
    final_ok = False
    print("final:", type(exc).__name__, str(exc)[:200], file=sys.stderr)
print(json.dumps({"waits": waits, "fails": fails, "final_ok": final_ok, "final_wait": time.monotonic() - t0,
                  "wall": time.monotonic() - t_start}))
"""


def _summ(waits: list[float]) -> dict:
    if not waits:
        return {"n": 0}
    w = sorted(waits)
    return {
        "n": len(w),
        "median_s": round(statistics.median(w), 4),
        "p90_s": round(w[int(0.9 * (len(w) - 1))], 4),
        "max_s": round(w[-1], 4),
        "total_s": round(sum(w), 2),
    }


def run_once(code: Path, readers: int, second_writer: bool, a) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench_conc_"))
    db, stop, lock_log = tmp / "c.duckdb", tmp / "stop", tmp / "locks.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "HF_HUB_OFFLINE": "1",
        "COUPLED_EVAL_LOCK_LOG": str(lock_log),
        "OMP_NUM_THREADS": str(a.threads),
    }
    py = [sys.executable]
    subprocess.run(
        py + ["-c", f"from engine import store\nwith store.writer({str(db)!r}): pass"],
        env=env,
        cwd=code,
        check=True,
    )
    procs = [
        subprocess.Popen(
            py + ["-c", READER, str(db), str(a.hold), str(a.gap), str(stop)],
            env=env,
            cwd=code,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(readers)
    ]
    if second_writer:
        procs.append(
            subprocess.Popen(
                py + ["-c", WRITER, str(db), str(a.writer_gap), str(stop)],
                env=env,
                cwd=code,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(1.0 if procs else 0)
    if a.synthetic:
        t0 = time.monotonic()
        try:
            g = subprocess.run(
                py + ["-c", SYNTH, str(db), str(a.chunks), str(a.chunk), str(a.compute_s)],
                env=env,
                cwd=code,
                capture_output=True,
                text=True,
                timeout=a.timeout,
            )
        except subprocess.TimeoutExpired as exc:  # starved: report it rather than crash
            g = subprocess.CompletedProcess(exc.cmd, -9, "", f"timed out after {a.timeout:.0f} s")
        wall = time.monotonic() - t0
        stop.touch()
        outs = [
            (json.loads(o.strip().splitlines()[-1]) if o.strip() else {}, e[-300:])
            for o, e in (p.communicate(timeout=120) for p in procs)
        ]
        r = json.loads(g.stdout.strip().splitlines()[-1]) if g.stdout.strip() else {}
        rd = [o for o, _ in outs[:readers]]
        res = {
            "mode": "synthetic",
            "readers": readers,
            "second_writer": second_writer,
            "wall_s": round(wall, 2),
            "chunks": a.chunks,
            "compute_s": a.compute_s,
            "chunk_fails": r.get("fails"),
            "final_status_written": r.get("final_ok"),
            "final_wait_s": round(r.get("final_wait", -1), 3),
            "s_per_chunk": round(r.get("wall", wall) / a.chunks, 3),
            "chunk_lock_waits": _summ(r.get("waits", [])),
            "reader_loops": sum(o.get("loops", 0) for o in rd),
            "reader_fails": sum(o.get("fails", 0) for o in rd),
            "reader_waits": _summ([w for o in rd for w in o.get("waits", [])]),
            "stderr": g.stderr.strip().splitlines()[-1:] if g.stderr.strip() else [],
        }
        if second_writer:
            o = outs[-1][0]
            res.update(
                {
                    "writer_loops": o.get("loops", 0),
                    "writer_fails": o.get("fails", 0),
                    "writer_waits": _summ(o.get("waits", [])),
                }
            )
        return res
    cmd = py + [
        "-m",
        "engine",
        "generate",
        "--models",
        "smollm2-135m",
        "--dataset",
        "demo",
        "--limit",
        str(a.prompts),
        "--repeats",
        str(a.repeats),
        "--max-new-tokens",
        str(a.tokens),
        "--batch-size",
        str(a.batch_size),
        "--threads",
        str(a.threads),
        "--device",
        "cpu",
        "--db",
        str(db),
    ]
    t0 = time.monotonic()
    g = subprocess.run(cmd, env=env, cwd=code, capture_output=True, text=True, timeout=a.timeout)
    wall = time.monotonic() - t0
    stop.touch()
    outs = []
    for p in procs:
        o, e = p.communicate(timeout=120)
        outs.append((json.loads(o.strip().splitlines()[-1]) if o.strip() else {}, e[-500:]))
    n_units = a.prompts * a.repeats * 2
    gen_waits = []
    if lock_log.exists():
        pids = {str(p.pid) for p in procs}
        gen_waits = [
            float(line.split()[2])
            for line in lock_log.read_text().splitlines()
            if line.split()[1] == "w" and line.split()[0] not in pids
        ]
    rd = [o for o, _ in outs[:readers]]
    res = {
        "readers": readers,
        "second_writer": second_writer,
        "returncode": g.returncode,
        "error": g.stderr.strip().splitlines()[-1] if g.returncode else None,
        "wall_s": round(wall, 2),
        "units": n_units,
        "s_per_unit": round(wall / n_units, 3),
        "generator_lock_waits": _summ(gen_waits),
        "reader_loops": sum(o.get("loops", 0) for o in rd),
        "reader_fails": sum(o.get("fails", 0) for o in rd),
        "reader_waits": _summ([w for o in rd for w in o.get("waits", [])]),
    }
    if second_writer:
        o = outs[-1][0]
        res.update(
            {
                "writer_loops": o.get("loops", 0),
                "writer_fails": o.get("fails", 0),
                "writer_waits": _summ(o.get("waits", [])),
            }
        )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--code", default=str(Path(__file__).resolve().parent.parent), help="checkout whose engine/ runs"
    )
    ap.add_argument("--readers", type=int, default=3)
    ap.add_argument("--hold", type=float, default=1.0)
    ap.add_argument("--gap", type=float, default=0.0)
    ap.add_argument("--second-writer", action="store_true")
    ap.add_argument("--writer-gap", type=float, default=0.2)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument(
        "--synthetic", action="store_true", help="the generation's write pattern without the model"
    )
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=8, help="units per chunk (synthetic)")
    ap.add_argument(
        "--compute-s", type=float, default=0.2, help="seconds of 'generation' per chunk (synthetic)"
    )
    ap.add_argument("--baseline", action="store_true", help="also run without readers/writer first")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args()
    if a.smoke:  # the synthetic write pattern, one reader, a few short chunks
        a.synthetic, a.readers, a.hold, a.chunks, a.chunk, a.compute_s, a.timeout = (
            True,
            1,
            0.05,
            3,
            4,
            0.02,
            60,
        )
    code = Path(a.code).resolve()
    rows = []
    if a.baseline:
        rows.append(run_once(code, 0, False, a))
        print(json.dumps(rows[-1]), flush=True)
    rows.append(run_once(code, a.readers, a.second_writer, a))
    print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
