"""The one-click demo from a cold start: model-cache conversion + generation (2 models x 2 modes) +
scoring, exactly the Home page's commands (dashboard.jobs.DEMO_ARGS), run in the foreground.

    .venv/bin/python bench/bench_demo.py [--threads N] [--keep DIR]

Prints wall time, CPU seconds (user + system of the children) and the load average before/after,
so a figure taken on a loaded machine can be converted to an idle estimate (CPU-s / cores), and
the headline summary (python -m engine summary).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dashboard import jobs  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one)")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench_demo_"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "demo.duckdb"
    env = dict(os.environ, COUPLED_EVAL_CACHE=str(work / "cache"), HF_HUB_OFFLINE="1")  # cold model cache
    py = sys.executable
    steps = [("generate", jobs.DEMO_ARGS + ["--db", str(db)]), ("score", jobs.score_args(jobs.DEMO_RUN, db))]
    load0 = os.getloadavg()
    out: dict = {"cores": os.cpu_count(), "load_before": load0, "steps": []}
    t_all, c_all = time.perf_counter(), _cpu()
    for name, a in steps:
        t, c = time.perf_counter(), _cpu()
        subprocess.run([py, "-m", "engine", *a], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        out["steps"].append({"step": name, "wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(_cpu() - c, 1)})
    out["wall_s"] = round(time.perf_counter() - t_all, 1)
    out["cpu_s"] = round(_cpu() - c_all, 1)
    out["load_after"] = os.getloadavg()
    out["idle_estimate_s"] = round(out["cpu_s"] / min(2, os.cpu_count() or 1), 1)
    summ = subprocess.run([py, "-m", "engine", "summary", "--db", str(db), "--run", jobs.DEMO_RUN, "--json"],
                          cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    s = json.loads(summ.stdout)
    out["accuracy"] = [{k: r[k] for k in ("model", "mode", "accuracy", "ci_low", "ci_high")} for r in s["accuracy"]]
    out["pairs"] = [{k: p.get(k) for k in ("agreement_coupled", "agreement_independent", "variance_saving")}
                    for p in s["pairs"]]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
