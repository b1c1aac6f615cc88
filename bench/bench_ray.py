"""Ray scale-out throughput (engine.generation.distributed): the plain single-process run vs 1 and 2 Ray replicas, same run.

    .venv/bin/python bench/bench_ray.py                                   # CPU: SmolLM2, demo, 2 rounds
    .venv/bin/python bench/bench_ray.py --device cuda --workers 1 2 4 8 --prompts 200 --repeats 10 \\
        --max-new-tokens 64 --batch-size 64 --shard-size 256                # a multi-GPU machine

One local Ray cluster is started first (its start-up time is reported on its own); then each
configuration runs the same generation (run_generation into a fresh DuckDB file) and the
configurations alternate round by round, so a load change on a shared machine hits all of them.
A replica's time includes starting its actor and loading its model copy (as a user pays it);
tokens/s = generated tokens / wall seconds of the whole run_generation call. Prints a markdown
table (median over rounds, and every round) and optionally writes JSON.

Threads: on CPU each configuration gets the same cores: plain = --threads torch threads, 1 replica
= --threads threads, N replicas = --threads / N threads each (torch's intra-op threads already use
every core, so N replicas on the same cores can only win what one process leaves idle: the
Python/tokenizer/sampling steps between matmuls and the per-step overheads that do not scale with
threads).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument(
        "--shard-size", type=int, default=8, help="units per shard (a prompt's units stay together)"
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-plain", action="store_true", help="skip the single-process run")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads in total (CPU)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:  # a tiny random model, 2 prompts, 1 worker, one round
        from _smoke import tiny_model_dir

        args.model, args.prompts, args.repeats, args.max_new_tokens = tiny_model_dir(), 2, 1, 2
        args.batch_size, args.shard_size, args.workers, args.rounds, args.threads = 4, 2, [1], 1, 1

    import ray
    import torch

    from engine import generation as G
    from engine import store
    from engine.generation.distributed import RayConfig, RayExecutor
    from engine.tasks import datasets

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    t = time.perf_counter()
    ray.init(
        address="local",
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=256 * 2**20,
    )
    start_s = time.perf_counter() - t
    res = ray.cluster_resources()
    ds = datasets.load_dataset(args.dataset, limit=args.prompts)
    cfg = G.GenConfig(
        temperature=0.7, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, trace_top_k=5
    )
    gpus = int(res.get("GPU", 0))
    configs = ([("plain", None)] if not args.no_plain else []) + [
        (f"{w} worker{'s' * (w > 1)}", w) for w in args.workers
    ]
    rows: dict[str, list[dict]] = {name: [] for name, _ in configs}
    tmp = Path(tempfile.mkdtemp(prefix="bench_ray_"))
    for rnd in range(args.rounds):
        for name, w in configs:
            db = tmp / f"{name.replace(' ', '_')}_{rnd}.duckdb"
            t = time.perf_counter()
            if w is None:
                torch.set_num_threads(args.threads)
                G.run_generation(
                    db,
                    [args.model],
                    ds,
                    args.repeats,
                    ["coupled", "independent"],
                    seed=rnd,
                    cfg=cfg,
                    show_bar=False,
                    device=args.device,
                )
            else:
                rc = RayConfig(
                    workers=w,
                    shard_units=args.shard_size,
                    threads_per_worker=max(1, args.threads // w),
                    cpus_per_worker=0 if gpus else max(1, int(res["CPU"]) // w),
                )
                with RayExecutor(rc) as ex:
                    G.run_generation(
                        db,
                        [args.model],
                        ds,
                        args.repeats,
                        ["coupled", "independent"],
                        seed=rnd,
                        cfg=cfg,
                        show_bar=False,
                        device=args.device,
                        executor=ex,
                    )
            wall = time.perf_counter() - t
            n = store.query_df(db, "SELECT count(*) AS n, sum(n_tokens) AS t FROM generations").iloc[0]
            rows[name].append(
                {
                    "round": rnd,
                    "wall_s": wall,
                    "units": int(n["n"]),
                    "tokens": int(n["t"]),
                    "tokens_per_s": float(n["t"]) / wall,
                }
            )
            print(
                f"round {rnd} {name}: {wall:.1f} s, {int(n['t'])} tokens, {float(n['t']) / wall:.1f} tok/s",
                file=sys.stderr,
                flush=True,
            )
    ray.shutdown()

    print(
        f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Ray cluster {res.get('CPU', 0):g} CPUs / {gpus} GPUs (start {start_s:.1f} s); model {args.model}, "
        f"{args.prompts} prompts x {args.repeats} repeats x 2 modes, {args.max_new_tokens} new tokens, "
        f"batch {args.batch_size}, shard {args.shard_size}, device {args.device}, {args.threads} threads in total\n"
    )
    print("| configuration | median tok/s | rounds (tok/s) | median wall s |")
    print("|---|---|---|---|")
    for name, _ in configs:
        r = rows[name]
        print(
            f"| {name} | {statistics.median(x['tokens_per_s'] for x in r):.1f} | "
            + ", ".join(f"{x['tokens_per_s']:.1f}" for x in r)
            + f" | {statistics.median(x['wall_s'] for x in r):.1f} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "ray_start_s": start_s, "results": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
