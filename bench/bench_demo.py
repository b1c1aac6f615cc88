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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from dashboard import jobs  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _engine(py: str, args: list[str], env: dict, in_process: bool) -> None:
    """``python -m engine ARGS`` (smoke: in this process, no second torch import)."""
    if in_process:
        from engine.cli import main as cli_main

        if cli_main(list(args)) != 0:
            raise SystemExit(f"engine {args[0]} failed")
        return
    subprocess.run([py, "-m", "engine", *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one)")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:  # the demo's two steps on a tiny random model, 2 questions, 2 tokens, the warm cache
        from _smoke import tiny_model_dir

        i = jobs.DEMO_ARGS.index("--models")
        demo = jobs.DEMO_ARGS[: i + 1] + [tiny_model_dir(), tiny_model_dir(1)] + jobs.DEMO_ARGS[i + 3 :]
        demo[demo.index("--max-new-tokens") + 1] = "2"
        demo_args = demo + ["--limit", "2"]
    else:
        demo_args = list(jobs.DEMO_ARGS)
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench_demo_"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "demo.duckdb"
    env = dict(
        os.environ, COUPLED_EVAL_CACHE=str(work / "cache"), HF_HUB_OFFLINE="1"
    )  # cold model cache
    py = sys.executable
    steps = [("generate", demo_args + ["--db", str(db)]), ("score", jobs.score_args(jobs.DEMO_RUN, db))]
    load0 = os.getloadavg()
    out: dict = {"cores": os.cpu_count(), "load_before": load0, "steps": []}
    t_all, c_all = time.perf_counter(), _cpu()
    for name, a in steps:
        t, c = time.perf_counter(), _cpu()
        _engine(py, a, env, args.smoke)
        out["steps"].append(
            {"step": name, "wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(_cpu() - c, 1)}
        )
    out["wall_s"] = round(time.perf_counter() - t_all, 1)
    out["cpu_s"] = round(_cpu() - c_all, 1)
    out["load_after"] = os.getloadavg()
    out["idle_estimate_s"] = round(out["cpu_s"] / min(2, os.cpu_count() or 1), 1)
    _engine(
        py,
        ["summary", "--db", str(db), "--run", jobs.DEMO_RUN, "--out", str(work / "summary.json")],
        env,
        args.smoke,
    )
    s = json.loads((work / "summary.json").read_text())
    out["accuracy"] = [
        {k: r[k] for k in ("model", "mode", "accuracy", "ci_low", "ci_high")} for r in s["accuracy"]
    ]
    out["pairs"] = [
        {k: p.get(k) for k in ("agreement_coupled", "agreement_independent", "variance_saving")}
        for p in s["pairs"]
    ]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
