"""Generation throughput: the batched engine vs the batch-1 reference loop, same model/prompts/settings.

    .venv/bin/python bench/bench_generation.py                      # SmolLM2 base, demo, CPU, 1 thread
    .venv/bin/python bench/bench_generation.py --device cuda --hbm-gbps 3350   # on an H100 SXM

Each side runs in its own child process (so peak RSS is its own), loads the model, warms up on one
short unit, then generates every (prompt, repeat) of the same prompts with the same temperature
and max_new_tokens. Throughput = generated tokens / wall seconds (prefill included: the reference
re-prefills every repeat, the engine prefills each prompt once per batch). Prints a markdown table.
CPU seconds (process time) are reported next to wall seconds: on a shared machine the wall clock
depends on what else runs, while a 1-thread process's CPU time measures its own work.

The roofline: a decode step reads every weight once, so at batch B the best possible decode rate is
B * bandwidth / weight_bytes tokens/s (KV-cache reads and compute ignored: a bound, not a target).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _child(args) -> dict:
    import torch

    from engine import generation as G
    from engine import models
    from engine.tasks import datasets

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    lm = models.load_model(args.model, device=args.device)
    load_s = time.perf_counter() - t0
    ds = datasets.load_dataset(args.dataset, limit=args.prompts)
    texts = [
        G.chat_text(lm.tokenizer, G.prompt_messages(p.user_prompt, ds.system_prompt)) for p in ds.prompts
    ]
    cuda = lm.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    weight_bytes = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    if args.part == "engine":
        cfg = G.GenConfig(
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            trace_top_k=5,
            record_traces=True,
        )
        units = [(p.prompt_id, r) for p in ds.prompts for r in range(args.repeats)]
        G.generate_units(
            lm,
            ds.prompts,
            units[:1],
            args.seed,
            G.GenConfig(max_new_tokens=2),
            system_prompt=ds.system_prompt,
        )
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        t = time.perf_counter()
        c = time.process_time()
        res = G.generate_units(lm, ds.prompts, units, args.seed, cfg, system_prompt=ds.system_prompt)
        sync()
        secs = time.perf_counter() - t
        cpu_s = time.process_time() - c
        tokens = sum(len(r.token_ids) for r in res)
        n_units = len(res)
    else:
        from reference_loop import reference_generate

        reference_generate(lm.model, lm.tokenizer, texts[:1], 1, args.seed, args.temperature, 2)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        t = time.perf_counter()
        c = time.process_time()
        res = reference_generate(
            lm.model, lm.tokenizer, texts, args.repeats, args.seed, args.temperature, args.max_new_tokens
        )
        sync()
        secs = time.perf_counter() - t
        cpu_s = time.process_time() - c
        tokens = sum(len(r) for r in res)
        n_units = len(res)
    return {
        "part": args.part,
        "units": n_units,
        "tokens": tokens,
        "seconds": secs,
        "tok_s": tokens / secs,
        "cpu_s": cpu_s,
        "tok_per_cpu_s": tokens / cpu_s,
        "load_s": load_s,
        "peak_rss_mb": _peak_rss_mb(),
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "device": str(lm.device),
        "dtype": str(lm.dtype).removeprefix("torch."),
        "weight_bytes": weight_bytes,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(lm.device) if cuda else None,
    }


def _median_run(rs: list[dict]) -> dict:
    """The run with the median CPU seconds (its own figures, not a mix of runs)."""
    return sorted(rs, key=lambda d: d["cpu_s"])[len(rs) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads for both sides (same for both)"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--hbm-gbps",
        type=float,
        default=3350.0,
        help="memory bandwidth for the roofline, GB/s (H100 SXM HBM3: 3350; H200: 4800)",
    )
    ap.add_argument(
        "--runs",
        type=int,
        default=1,
        help="alternate engine and reference this many times; the table shows medians (a shared "
        "VM's timings wander by 10-15%% from run to run)",
    )
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    ap.add_argument("--part", choices=["engine", "reference"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.smoke:  # a tiny random model, a few units, one run
        from _smoke import tiny_model_dir

        args.model = tiny_model_dir()
        args.prompts, args.repeats, args.batch_size, args.max_new_tokens, args.runs = 2, 2, 4, 3, 1
    if args.part:
        print(json.dumps(_child(args)))
        return 0

    if args.runs < 1:
        ap.error(f"--runs must be >= 1, got {args.runs}")
    runs: dict[str, list[dict]] = {"engine": [], "reference": []}
    for _ in range(args.runs):
        for part in ("engine", "reference"):  # alternated, so slow phases of the machine hit both
            cmd = [sys.executable, __file__, "--part", part] + [a for a in (argv or sys.argv[1:])]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)}
            load_before = os.getloadavg()[0]
            if args.smoke:  # in this process: no second torch import (the numbers mean nothing anyway)
                runs[part].append(
                    {
                        **_child(argparse.Namespace(**{**vars(args), "part": part})),
                        "loadavg_1min_before": load_before,
                    }
                )
                continue
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            if p.returncode != 0:
                print(p.stderr[-3000:], file=sys.stderr)
                return p.returncode
            runs[part].append(
                {**json.loads(p.stdout.strip().splitlines()[-1]), "loadavg_1min_before": load_before}
            )
    results = {part: _median_run(rs) for part, rs in runs.items()}
    e, r = results["engine"], results["reference"]
    pair_ratios = [
        re_["tok_per_cpu_s"] / rr["tok_per_cpu_s"] for re_, rr in zip(runs["engine"], runs["reference"])
    ]
    step_s = e["weight_bytes"] / (args.hbm_gbps * 1e9)
    roof = args.batch_size / step_s
    machine = f"{platform.machine()}, {os.cpu_count()} CPU cores visible, {args.threads} torch thread(s)"
    if e["gpu"]:
        machine += f", {e['gpu']}"
    print(
        f"model {args.model} ({e['dtype']}, {e['weight_bytes'] / 2**20:.0f} MiB of weights) on {e['device']}; "
        f"{args.prompts} prompts x {args.repeats} repeats, T={args.temperature}, max_new_tokens={args.max_new_tokens}; "
        f"{machine}; torch {e['torch']}; 1-min load average before engine/reference: "
        f"{e['loadavg_1min_before']:.1f}/{r['loadavg_1min_before']:.1f}\n"
    )
    print(
        "| loop | batch | units | tokens | wall s | tokens/s | speed-up | CPU s | tokens/CPU-s | speed-up (CPU) | peak RSS (MiB) | peak CUDA (MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, d, bs in (
        ("reference (batch 1, per-token Python loop)", r, 1),
        ("engine (batched, shared prefill)", e, args.batch_size),
    ):
        cu = f"{d['cuda_peak_mb']:.0f}" if d["cuda_peak_mb"] is not None else "n/a (CPU)"
        print(
            f"| {name} | {bs} | {d['units']} | {d['tokens']} | {d['seconds']:.1f} | {d['tok_s']:.1f} | "
            f"{d['tok_s'] / r['tok_s']:.1f}x | {d['cpu_s']:.1f} | {d['tok_per_cpu_s']:.1f} | "
            f"{d['tok_per_cpu_s'] / r['tok_per_cpu_s']:.1f}x | {d['peak_rss_mb']:.0f} | {cu} |"
        )
    print(
        f"\nroofline at {args.hbm_gbps:g} GB/s: {e['weight_bytes'] / 1e6:.0f} MB of weights per decode step "
        f"-> >= {step_s * 1e3:.3f} ms/step -> <= {roof:,.0f} tokens/s at batch {args.batch_size} "
        f"(engine reached {e['tok_s'] / roof:.2%} of it{'' if e['gpu'] else '; CPU run: roofline given for a GPU of that bandwidth'})"
    )
    if args.runs > 1:
        cpu = {part: ", ".join(f"{d['cpu_s']:.1f}" for d in rs) for part, rs in runs.items()}
        print(
            f"\n{args.runs} alternating runs (table: the median run of each side). CPU s, engine: {cpu['engine']}; "
            f"reference: {cpu['reference']}. Speed-up (CPU) of each engine/reference pair: "
            + ", ".join(f"{x:.1f}x" for x in pair_ratios)
            + f"; median {statistics.median(pair_ratios):.1f}x"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "results": results,
                    "runs": runs,
                    "pair_speedups_cpu": pair_ratios,
                    "roofline_tok_s": roof,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
