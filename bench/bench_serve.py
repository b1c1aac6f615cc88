"""engine serve: served throughput vs engine generate, and the server's own overhead per request.

    .venv/bin/python bench/bench_serve.py --threads 1          # SmolLM2-135M, the demo prompts, CPU
    .venv/bin/python bench/bench_serve.py --smoke              # the tiny model, a few requests (seconds)
    .venv/bin/python bench/bench_serve.py --skip-throughput --requests 200 --overhead-concurrency 1 8

1. Throughput. The demo's 40 questions (its system prompt, chat template) x ``--repeats``, at
   temperature 0.7 and ``--max-new-tokens``: through ``run_generation`` (what ``engine generate``
   runs; the model loaded once, outside the timing) and as chat requests to a server on the same
   loaded model, ``--concurrency`` clients at a time (raw HTTP keep-alive clients, as lm-eval's
   ``num_concurrent``). ``--pairs`` alternating pairs (generate then serve, serve then generate, ...)
   after an untimed warm-up, so both sides see comparable load; per side generated tokens / wall
   seconds and CPU milliseconds per token (this whole process: the server, its store and the
   clients' HTTP), and per pair the ratio served / generate in both (target >= 0.8). Both store their
   rows (the server journals each answer before sending it and commits the journal every 0.1 s).
2. Overhead per request. The same single-token requests to the tiny 2-layer model, (a) straight to
   the model's worker (no HTTP, no JSON, no store) and (b) through the server, one at a time and
   ``--overhead-concurrency`` at a time: the difference of the median latencies is what HTTP, JSON
   and storing add (target < 5 ms), with the same difference in this process's CPU time per request
   (client + server + store: less sensitive to the machine's load; the client's share included, so an
   upper bound of the server's), and the store's share: its transactions (group commits of the
   journaled answers, every ``--commit-every`` seconds) in wall and writer-thread CPU per request; the
   CPU figures wait for the last answers' commit. Then the same requests again
   from clients in a process of their own: this process's CPU is then the server's alone
   (``cpu_server_overhead_ms``, the server's own overhead the target is about).

Reports the 1-minute load average next to every figure (the machine is shared).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import statistics
import subprocess
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


def _generate(lm, dataset, repeats: int, cfg, db: Path) -> dict:
    """One ``run_generation`` (what ``engine generate`` runs) on the loaded model: wall, CPU, tokens."""
    from engine.generation import run_generation
    from engine.store import query_df

    t0, c0 = time.perf_counter(), time.process_time()
    run = run_generation(db, [lm], dataset, repeats, ("coupled",), 0, cfg, show_bar=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    sql = "SELECT sum(n_tokens) FROM generations WHERE run_id = ?"
    return _rate(wall, cpu, int(query_df(db, sql, [run]).iloc[0, 0]))


def _chat_bodies(lm, dataset, repeats: int, cfg) -> list[dict]:
    sys_msg = (
        [{"role": "system", "content": dataset.system_prompt}]
        if getattr(dataset, "system_prompt", None)
        else []
    )
    return [
        {
            "model": lm.name,
            "messages": [*sys_msg, {"role": "user", "content": p.user_prompt}],
            "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature,
        }
        for p in dataset.prompts
        for _ in range(repeats)
    ]


def _serve(lm, bodies: list[dict], concurrency: int, batch_size: int, db: Path, run_id: str) -> dict:
    """The same requests to a server on the loaded model, ``concurrency`` clients at a time (the
    server started and one request answered outside the timing). CPU: this whole process (server,
    store and the clients' HTTP)."""
    from engine.serving.core import ServeConfig
    from engine.serving.server import ServerThread

    scfg = ServeConfig(run_id=run_id, db=db, batch_size=batch_size, max_queue=10_000)
    local = threading.local()
    with ServerThread(scfg, [lm]) as srv:
        path = urlparse(srv.url).path + "/chat/completions"

        def one(body):
            if not hasattr(local, "conn"):
                local.conn = _client(srv.url)
            return _post(local.conn, path, body)["usage"]["completion_tokens"]

        warm = [{"role": "user", "content": "Warm-up: say hi."}]
        one({**bodies[0], "messages": warm, "max_tokens": 2})  # not timed; a question of its own
        t0, c0 = time.perf_counter(), time.process_time()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
            tokens = sum(ex.map(one, bodies))
        _committed(srv.core.writer)  # stored, as generate's rows are when it returns
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {**_rate(wall, cpu, tokens), "requests": len(bodies)}


def _rate(wall: float, cpu: float, tokens: int) -> dict:
    return {
        "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "cpu_ms_per_token": round(1000 * cpu / tokens, 2),
        "load_1min": round(os.getloadavg()[0], 2),  # at the phase's end
    }


def throughput(
    lm,
    dataset,
    warm_dataset,
    repeats: int,
    cfg,
    concurrency: int,
    batch_size: int,
    db_dir: Path,
    pairs: int,
) -> dict:
    """``pairs`` alternating pairs (generate then serve, then serve then generate, ...), so that both
    see comparable load; the ratio served / generate per pair, in tokens per wall second and in
    tokens per CPU second."""
    import dataclasses

    warm = dataclasses.replace(cfg, max_new_tokens=2)  # first calls (kernels, caches): not timed
    _generate(lm, warm_dataset, 1, warm, db_dir / "warm.duckdb")
    bodies = _chat_bodies(lm, dataset, repeats, cfg)
    out = []
    for k in range(pairs):
        order = ("generate", "served") if k % 2 == 0 else ("served", "generate")
        pair: dict = {"order": " then ".join(order)}
        for side in order:
            if side == "generate":
                pair[side] = _generate(lm, dataset, repeats, cfg, db_dir / f"gen{k}.duckdb")
            else:
                pair[side] = _serve(
                    lm, bodies, concurrency, batch_size, db_dir / f"serve{k}.duckdb", "bench"
                )
            print(f"pair {k + 1}, {side}: {pair[side]}", file=sys.stderr, flush=True)
        g, s = pair["generate"], pair["served"]
        pair["ratio_wall"] = round(s["tokens_per_s"] / g["tokens_per_s"], 3)
        pair["ratio_cpu"] = round(g["cpu_ms_per_token"] / s["cpu_ms_per_token"], 3)
        out.append(pair)
    return {"pairs": out}


class _StoreTimer:
    """Times the served run's transactions (``HeldWriter.write``, on the writer thread): wall and that
    thread's CPU per transaction. Patched onto the class while the server runs."""

    def __init__(self):
        from engine.store.served import HeldWriter

        self.cls, self.orig = HeldWriter, HeldWriter.write
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __enter__(self):
        orig, wall, cpu = self.orig, self.wall, self.cpu

        def write(held, *args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return orig(held, *args, **kwargs)
            finally:
                wall.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)

        self.cls.write = write
        return self

    def __exit__(self, *exc):
        self.cls.write = self.orig


def _direct(lm, ids: list[int], n: int, concurrency: int) -> tuple[list[float], float, float]:
    """Single-token choices straight to the model's worker, ``concurrency`` at a time: latency of
    each group, CPU and wall per choice."""
    from engine.generation.types import Unit
    from engine.serving.seq import Seq
    from engine.serving.worker import ModelWorker

    w = ModelWorker("tiny", lm, "token_id", batch_size=8)
    ev0 = threading.Event()  # warm-up (the first forward pass): not timed
    w.submit([Seq(Unit("warm", 0, 1), ids, 1.0, 0, 1.0, 1, lambda s: ev0.set())])
    ev0.wait()
    lat = []
    t0_all, c0 = time.perf_counter(), time.process_time()
    for i in range(0, n, concurrency):
        evs = [threading.Event() for _ in range(min(concurrency, n - i))]
        seqs = [
            Seq(Unit(f"p{(i + j) % 7}", i + j, 0), ids, 1.0, 0, 1.0, 1, lambda s, ev=ev: ev.set())
            for j, ev in enumerate(evs)
        ]
        t0 = time.perf_counter()
        w.submit(seqs)
        for ev in evs:
            ev.wait()
        lat.append(time.perf_counter() - t0)
    cpu, wall = (time.process_time() - c0) / n, (time.perf_counter() - t0_all) / n
    w.close()
    return lat, cpu, wall


def _served(lm, prompt: str, n: int, concurrency: int, db: Path) -> dict:
    """The same requests through a server, ``concurrency`` clients at a time."""
    from engine.serving.core import ServeConfig
    from engine.serving.server import ServerThread

    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 1.0}
    with _StoreTimer() as store, ServerThread(ServeConfig(run_id="overhead", db=db), [lm]) as srv:
        path = urlparse(srv.url).path + "/completions"
        _requests(srv.url, path, body, 1, 1)  # warm-up: a connection, the first store transaction
        store.wall.clear(), store.cpu.clear()
        tx0 = srv.core.writer.transactions
        c0 = time.process_time()
        lat, wall = _requests(srv.url, path, body, n, concurrency)
        _committed(srv.core.writer)  # the last answers' commit is part of their cost
        cpu = (time.process_time() - c0) / n
        tx = srv.core.writer.transactions - tx0
        timed = {"wall": list(store.wall), "cpu": list(store.cpu)}  # these requests' transactions
        # the same requests from clients in another process: this process's CPU is the server's alone
        c0 = time.process_time()
        got = subprocess.run(
            [sys.executable, __file__, "--client", json.dumps([srv.url, path, body, n, concurrency])],
            capture_output=True,
            text=True,
            check=True,
        )
        _committed(srv.core.writer)
        cpu_server = (time.process_time() - c0) / n
        apart = json.loads(got.stdout)
    return {
        "lat": lat,
        "cpu": cpu,
        "wall": wall,
        "transactions": tx,
        "store": timed,
        "cpu_server": cpu_server,
        "apart": apart,
    }


def _committed(writer) -> None:
    """Wait until the server's writer has committed every journaled answer (an answer is sent after
    its journal append; the commit follows within ``--commit-every``)."""
    while writer.stored < writer.journaled:
        time.sleep(0.005)


def _requests(url: str, path: str, body: dict, n: int, concurrency: int) -> tuple[list[float], float]:
    """``n`` requests from ``concurrency`` keep-alive clients at a time: each one's latency, and the
    wall seconds per request."""
    local = threading.local()

    def one(_):
        if not hasattr(local, "conn"):
            local.conn = _client(url)
        t0 = time.perf_counter()
        _post(local.conn, path, body)
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        lat = list(ex.map(one, range(n)))
    return lat, (time.perf_counter() - t0) / n


def _clients(spec: str) -> None:
    """``--client``: :func:`_requests` from this process (the server's CPU then excludes the
    clients'); prints the latencies and the wall per request."""
    lat, wall = _requests(*json.loads(spec))
    print(json.dumps({"lat": lat, "wall": wall}))


def overhead(n: int, concurrency: int, db_dir: Path) -> dict:
    """What the server adds to a single-token request of the tiny model: through the server vs
    straight to the model's worker, one at a time (``concurrency`` 1) or ``concurrency`` at once."""
    from engine.models.loading import from_objects
    from engine.testing import tiny_lm

    lm = from_objects("tiny", *tiny_lm(0))
    prompt = "what is the capital of France?"
    ids = lm.tokenizer(prompt)["input_ids"]
    direct, cpu_direct, wall_direct = _direct(lm, ids, n, concurrency)
    s = _served(lm, prompt, n, concurrency, db_dir / f"overhead{concurrency}.duckdb")
    store = s["store"]
    out: dict = {"requests": n, "concurrency": concurrency}
    apart = s["apart"]
    if concurrency == 1:  # latency: the median request
        d_ms, s_ms = 1000 * statistics.median(direct), 1000 * statistics.median(s["lat"])
        out.update(direct_ms_median=round(d_ms, 2), served_ms_median=round(s_ms, 2))
        out["overhead_ms"] = round(s_ms - d_ms, 2)
        out["overhead_ms_clients_apart"] = round(1000 * statistics.median(apart["lat"]) - d_ms, 2)
    return {
        **out,
        # wall seconds of the whole measurement / requests (at concurrency > 1: the inverse throughput)
        "wall_direct_ms": round(1000 * wall_direct, 2),
        "wall_served_ms": round(1000 * s["wall"], 2),
        "wall_overhead_ms": round(1000 * (s["wall"] - wall_direct), 2),
        # CPU of this process (client, server, store) per request: less sensitive to the machine's load
        "cpu_direct_ms": round(1000 * cpu_direct, 2),
        "cpu_served_ms": round(1000 * s["cpu"], 2),
        "cpu_overhead_ms": round(1000 * (s["cpu"] - cpu_direct), 2),
        # the clients in another process: the server's own CPU per request (HTTP, JSON, store)
        "wall_overhead_ms_clients_apart": round(1000 * (apart["wall"] - wall_direct), 2),
        "cpu_server_overhead_ms": round(1000 * (s["cpu_server"] - cpu_direct), 2),
        # the store's share: its transactions (one per batch of finished requests), per request
        "transactions": s["transactions"],
        "store_ms_per_transaction_median": round(1000 * statistics.median(store["wall"]), 2),
        "store_ms_per_request": round(1000 * sum(store["wall"]) / n, 2),
        "store_cpu_ms_per_request": round(1000 * sum(store["cpu"]) / n, 2),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--client"]:  # the clients of the overhead measurement, in a process of their own
        _clients(argv[1])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32, help="both: generate's and the server's")
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=2, help="throughput: alternating generate/serve pairs")
    ap.add_argument("--requests", type=int, default=200, help="overhead: requests per measurement")
    ap.add_argument(
        "--overhead-concurrency",
        type=int,
        nargs="+",
        default=[1, 8],
        help="overhead: clients at a time, one measurement each",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-overhead", action="store_true")
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
            warm_ds = load_dataset("demo", limit=2)
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
                "pairs": a.pairs,
                **throughput(
                    lm, ds, warm_ds, a.repeats, cfg, a.concurrency, a.batch_size, Path(d), a.pairs
                ),
            }
        if not a.skip_overhead:
            out["overhead"] = [
                overhead(10 if a.smoke else a.requests, c, Path(d)) for c in a.overhead_concurrency
            ]
    print(json.dumps(out, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
