"""engine serve: served throughput vs engine generate, and the server's own overhead per request.

    .venv/bin/python bench/bench_serve.py                      # SmolLM2-135M, the demo prompts, CPU
    .venv/bin/python bench/bench_serve.py --smoke              # the tiny model, a few requests (seconds)
    .venv/bin/python bench/bench_serve.py --repeats 2 --concurrency 8 --max-new-tokens 20 --threads 2

1. Throughput. The demo's 40 questions (its system prompt, chat template) x ``--repeats``, at
   temperature 0.7 and ``--max-new-tokens``: once through ``run_generation`` (what ``engine
   generate`` runs; the model loaded once, outside the timing) and once as chat requests to a
   server on the same loaded model, ``--concurrency`` clients at a time (raw HTTP keep-alive
   clients, as lm-eval's ``num_concurrent``); generated tokens / wall seconds for each, and the
   ratio (target >= 0.8). Both store their rows (the server commits before it answers).
2. Overhead per request. The same single-token requests to the tiny 2-layer model one at a time,
   (a) straight to the model's worker (no HTTP, no JSON, no store) and (b) through the server; the
   difference of the median latencies is what HTTP, JSON and storing add (target < 5 ms), with the
   median commit time of one served request's rows alone (a connection of its own), and the same
   difference in this process's CPU time per request (client + server + store; independent of the
   machine's load, an upper bound of the server's share).

Reports the 1-minute load average next to every figure (the machine is shared).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _smoke import SMOKE_HELP  # noqa: E402


def _client(url: str) -> http.client.HTTPConnection:
    u = urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=600)


def _post(conn: http.client.HTTPConnection, path: str, body: dict) -> dict:
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    out = json.loads(r.read())
    if r.status != 200:
        raise RuntimeError(f"{r.status}: {out}")
    return out


def throughput(lm, dataset, repeats: int, cfg, concurrency: int, batch_size: int, db_dir: Path) -> dict:
    from engine.generation import run_generation
    from engine.serving.core import ServeConfig
    from engine.serving.server import ServerThread
    from engine.store import query_df

    t0 = time.perf_counter()
    run = run_generation(
        db_dir / "gen.duckdb", [lm], dataset, repeats, ("coupled",), 0, cfg, show_bar=False
    )
    gen_s = time.perf_counter() - t0
    gen_tokens = int(
        query_df(
            db_dir / "gen.duckdb", "SELECT sum(n_tokens) FROM generations WHERE run_id = ?", [run]
        ).iloc[0, 0]
    )
    sys_msg = (
        [{"role": "system", "content": dataset.system_prompt}]
        if getattr(dataset, "system_prompt", None)
        else []
    )
    bodies = [
        {
            "model": lm.name,
            "messages": [*sys_msg, {"role": "user", "content": p.user_prompt}],
            "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature,
        }
        for p in dataset.prompts
        for _ in range(repeats)
    ]
    scfg = ServeConfig(
        run_id="bench", db=db_dir / "serve.duckdb", batch_size=batch_size, max_queue=10_000
    )
    local = threading.local()
    with ServerThread(scfg, [lm]) as srv:
        path = urlparse(srv.url).path + "/chat/completions"

        def one(body):
            if not hasattr(local, "conn"):
                local.conn = _client(srv.url)
            return _post(local.conn, path, body)["usage"]["completion_tokens"]

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
            served_tokens = sum(ex.map(one, bodies))
        served_s = time.perf_counter() - t0
    gen_tps, srv_tps = gen_tokens / gen_s, served_tokens / served_s
    return {
        "generate": {
            "seconds": round(gen_s, 2),
            "tokens": gen_tokens,
            "tokens_per_s": round(gen_tps, 1),
        },
        "served": {
            "seconds": round(served_s, 2),
            "tokens": served_tokens,
            "tokens_per_s": round(srv_tps, 1),
            "requests": len(bodies),
        },
        "ratio": round(srv_tps / gen_tps, 3),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def overhead(n: int, db_dir: Path) -> dict:
    """Mean latency of one single-token request: straight to the worker vs through the server."""
    from engine.generation.types import Unit
    from engine.models.loading import from_objects
    from engine.serving.core import ServeConfig
    from engine.serving.seq import Seq
    from engine.serving.server import ServerThread
    from engine.serving.worker import ModelWorker
    from engine.store.served import write_served
    from engine.testing import tiny_lm

    lm = from_objects("tiny", *tiny_lm(0))
    prompt = "what is the capital of France?"
    ids = lm.tokenizer(prompt)["input_ids"]
    w = ModelWorker("tiny", lm, "token_id", batch_size=8)
    direct = []
    c0 = time.process_time()
    for i in range(n):
        ev = threading.Event()
        t0 = time.perf_counter()
        w.submit([Seq(Unit(f"p{i % 7}", i, 0), ids, 1.0, 0, 1.0, 1, lambda s, ev=ev: ev.set())])
        ev.wait()
        direct.append(time.perf_counter() - t0)
    cpu_direct = (time.process_time() - c0) / n
    w.close()
    scfg = ServeConfig(run_id="overhead", db=db_dir / "overhead.duckdb")
    served, commits = [], []
    with ServerThread(scfg, [lm]) as srv:
        conn = _client(srv.url)
        path = urlparse(srv.url).path + "/completions"
        c0 = time.process_time()
        for _ in range(n):
            t0 = time.perf_counter()
            _post(conn, path, {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 1.0})
            served.append(time.perf_counter() - t0)
        cpu_served = (time.process_time() - c0) / n
        tx0 = srv.core.writer.transactions
        rows = srv.core.writer.stored
    # one request's rows alone, committed as the writer does (a new transaction each)
    from engine.store.generations import GenerationRow
    from engine.store.served import ServedRow

    for i in range(min(n, 50)):
        g = GenerationRow("overhead", "tiny", f"x{i}", 0, "coupled", 0, "a", [5], "length", 1)
        s = ServedRow(
            "overhead",
            "tiny",
            f"x{i}",
            0,
            "coupled",
            "c",
            0,
            "completions",
            False,
            "{}",
            9,
            [0.5],
            [],
            0.0,
        )
        t0 = time.perf_counter()
        write_served(db_dir / "overhead.duckdb", "overhead", [], [g], [s])
        commits.append(time.perf_counter() - t0)
    d_ms, s_ms = 1000 * statistics.median(direct), 1000 * statistics.median(served)
    return {
        "requests": n,
        "direct_ms_median": round(d_ms, 2),
        "served_ms_median": round(s_ms, 2),
        "overhead_ms": round(s_ms - d_ms, 2),
        # CPU of this process (client, server, store) per request: independent of the machine's load
        "cpu_direct_ms": round(1000 * cpu_direct, 2),
        "cpu_served_ms": round(1000 * cpu_served, 2),
        "cpu_overhead_ms": round(1000 * (cpu_served - cpu_direct), 2),
        "commit_ms_median": round(1000 * statistics.median(commits), 2),
        "transactions": tx0,
        "stored": rows,
        "load_1min": round(os.getloadavg()[0], 2),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32, help="both: generate's and the server's")
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--requests", type=int, default=200, help="overhead: sequential requests")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    ap.add_argument("--out", help="write the result as JSON")
    a = ap.parse_args(argv)

    import torch

    from engine import models
    from engine.generation import GenConfig
    from engine.tasks.datasets import load_dataset

    if a.threads:
        torch.set_num_threads(a.threads)
    out: dict = {"machine": f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}"}
    with tempfile.TemporaryDirectory() as d:
        if not a.skip_throughput:
            if a.smoke:
                from _smoke import tiny_model_dir

                lm = models.load_model(tiny_model_dir(), device="cpu")
                ds = load_dataset("demo", limit=3)
            else:
                lm = models.load_model(a.model, device="cpu")
                ds = load_dataset("demo")
            cfg = GenConfig(
                temperature=0.7,
                max_new_tokens=4 if a.smoke else a.max_new_tokens,
                batch_size=a.batch_size,
                trace_top_k=0,
                record_traces=False,
            )
            out["throughput"] = {
                "model": a.model if not a.smoke else "tiny",
                "prompts": len(ds.prompts),
                "repeats": a.repeats,
                "concurrency": a.concurrency,
                "batch_size": a.batch_size,
                **throughput(lm, ds, a.repeats, cfg, a.concurrency, a.batch_size, Path(d)),
            }
        out["overhead"] = overhead(10 if a.smoke else a.requests, Path(d))
    print(json.dumps(out, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
