"""API judge throughput against a fake OpenAI-compatible server with a fixed latency.

    .venv/bin/python bench/bench_judge.py                 # 2,000 comparisons, 50 ms, concurrency 32
    .venv/bin/python bench/bench_judge.py --smoke         # 120 comparisons (a few seconds)
    .venv/bin/python bench/bench_judge.py --comparisons 5000 --latency-ms 200 --concurrency 64

A run of 2 models is stored with enough units that both presentation orders give the requested
number of comparisons; the fake server (tests/fake_openai.py, 127.0.0.1) sleeps ``--latency-ms``
per request and answers a verdict; it runs in its own (forked) process, as a remote server would,
so the timing is the judge's. The whole ``judge_run`` is timed: planning, building prompts
from DuckDB, the requests (N in flight), parsing and the small-transaction writes. Reports wall
seconds, the judge process's CPU seconds (independent of other load on the machine), the 1-minute
load average, requests/s, the server's peak in-flight count and whether every comparison has exactly
one stored verdict. With a 50 ms latency the floor is comparisons x 0.05 / concurrency seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comparisons", type=int, default=2000)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument(
        "--smoke", action="store_true", help="120 comparisons: checks the script runs (seconds)"
    )
    ap.add_argument("--out", help="write the result as JSON")
    a = ap.parse_args(argv)
    n = 120 if a.smoke else a.comparisons

    from engine.tasks import judge as J
    from engine.tasks.judge_api import ApiJudge, ApiJudgeConfig
    from tests.fake_openai import Action, FakeOpenAIProcess, verdict_by_rank
    from tests.test_judge import make_judge_run

    key = "sk-bench"
    os.environ["BENCH_JUDGE_KEY"] = key
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        units = (n + 1) // 2  # 2 models, both orders: 2 comparisons per unit
        make_judge_run(db, n_prompts=units, repeats=1, models=("m1", "m2"), modes=("coupled",))
        with FakeOpenAIProcess(
            key=key, latency_s=a.latency_ms / 1000.0, script=lambda b, k: Action(text=verdict_by_rank(b))
        ) as srv:
            judge = ApiJudge(
                ApiJudgeConfig("judge-1", srv.url, "BENCH_JUDGE_KEY", a.concurrency, 3, 30.0, 16)
            )
            judge.preflight()
            t0, c0 = time.perf_counter(), time.process_time()
            s = J.judge_run(db, "r1", "bench", J.JudgeConfig("bench"), api=judge, show_bar=False)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak, sent = srv.max_inflight, srv.n_chat
        from engine import store

        keys = store.query_df(
            db, "SELECT prompt_id, repeat, mode, model_a, model_b, presented FROM judgments"
        )
    res = {
        "comparisons": s.n_tasks,
        "latency_ms": a.latency_ms,
        "concurrency": a.concurrency,
        "wall_s": round(wall, 3),
        "judge_cpu_s": round(cpu, 3),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "requests_per_s": round(sent / wall, 1),
        "requests_sent": sent,
        "peak_in_flight": peak,
        "floor_s": round(s.n_tasks * a.latency_ms / 1000 / a.concurrency, 3),
        "one_verdict_each": bool(len(keys) == s.n_tasks and not keys.duplicated().any()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    }
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
