"""Our transformers backend (coupled, keyed noise) vs transformers' own batched ``model.generate`` (sampling).

    .venv/bin/python bench/bench_hf_generate.py --runs 3          # SmolLM2-135M, demo prompts, CPU, 1 thread

Same model, prompts (chat template + the dataset's system prompt), batch size, max_new_tokens,
temperature and repeats on both sides; no top-k / top-p on either (``generate`` is given top_k=0,
top_p=1.0, since its defaults would filter). The baseline has no coupling: ``generate`` draws from
torch's global generator with ``torch.multinomial``; it runs static batches of ``--batch-size`` rows
(a prompt's repeats in one batch, rows left-padded; a batch runs until its last row stops). The
engine: engine.generation.generate_units (continuous batching, keyed noise, shared prefill), traces
off (``--trace-top-k 0``, as ``generate`` records none). Throughput = generated tokens (stop token
included) / seconds. Each side runs in its own child process; the sides alternate ``--runs`` times
(the machine is shared: its speed wanders) and the table shows each side's median run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402


def _child(args) -> dict:
    import torch

    from engine import generation as G
    from engine import models
    from engine.generation.prompts import stop_token_ids
    from engine.tasks import datasets

    torch.set_num_threads(args.threads)
    lm = models.load_model(args.model, device=args.device)
    ds = datasets.load_dataset(args.dataset, limit=args.prompts)
    units = [(p.prompt_id, r) for p in ds.prompts for r in range(args.repeats)]
    if args.part == "engine":
        cfg = G.GenConfig(
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            trace_top_k=args.trace_top_k,
            record_traces=bool(args.trace_top_k),
        )
        G.generate_units(
            lm,
            ds.prompts,
            units[:1],
            args.seed,
            G.GenConfig(max_new_tokens=2),
            system_prompt=ds.system_prompt,
        )
        t, c = time.perf_counter(), time.process_time()
        res = G.generate_units(lm, ds.prompts, units, args.seed, cfg, system_prompt=ds.system_prompt)
        secs, cpu_s = time.perf_counter() - t, time.process_time() - c
        tokens = sum(len(r.token_ids) for r in res)
    else:
        tok, model = lm.tokenizer, lm.model
        text = {
            p.prompt_id: G.chat_text(tok, G.prompt_messages(p.user_prompt, ds.system_prompt))
            for p in ds.prompts
        }
        eos = sorted(stop_token_ids(lm))
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
        kw = dict(
            do_sample=True,
            temperature=args.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=args.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
        )
        torch.manual_seed(args.seed)  # generate's sampling draws from the global generator

        def run(batch_units, max_new):
            n = 0
            for a in range(0, len(batch_units), args.batch_size):
                chunk = batch_units[a : a + args.batch_size]
                enc = tok(
                    [text[p] for p, _ in chunk],
                    return_tensors="pt",
                    padding=True,
                    add_special_tokens=False,
                ).to(lm.device)
                with torch.inference_mode():
                    out = model.generate(**enc, **{**kw, "max_new_tokens": max_new})
                gen = out[:, enc["input_ids"].shape[1] :].tolist()
                for row in gen:  # tokens up to and including the first stop token (the rest is padding)
                    k = next((i + 1 for i, x in enumerate(row) if x in eos), len(row))
                    n += k
            return n

        run(units[:1], 2)
        t, c = time.perf_counter(), time.process_time()
        tokens = run(units, args.max_new_tokens)
        secs, cpu_s = time.perf_counter() - t, time.process_time() - c
    return {
        "part": args.part,
        "units": len(units),
        "tokens": tokens,
        "seconds": secs,
        "tok_s": tokens / secs,
        "cpu_s": cpu_s,
        "tok_per_cpu_s": tokens / cpu_s,
        "torch": torch.__version__,
        "dtype": str(lm.dtype).removeprefix("torch."),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--trace-top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--part", choices=["engine", "generate"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.smoke:  # a tiny random model, a few units, one run
        from _smoke import tiny_model_dir

        args.model = tiny_model_dir()
        args.prompts, args.repeats, args.batch_size, args.max_new_tokens, args.runs = 2, 2, 4, 3, 1
    if args.part:
        print(json.dumps(_child(args)))
        return 0
    runs: dict[str, list[dict]] = {"engine": [], "generate": []}
    for i in range(args.runs):
        order = (
            ("engine", "generate") if i % 2 == 0 else ("generate", "engine")
        )  # alternate who goes first
        for part in order:
            cmd = [sys.executable, __file__, "--part", part] + list(
                argv if argv is not None else sys.argv[1:]
            )
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)}
            load = os.getloadavg()[0]
            if args.smoke:  # in this process: no second torch import (the numbers mean nothing anyway)
                runs[part].append(
                    {
                        **_child(argparse.Namespace(**{**vars(args), "part": part})),
                        "loadavg_1min_before": load,
                    }
                )
                continue
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            if p.returncode != 0:
                print(p.stderr[-3000:], file=sys.stderr)
                return p.returncode
            runs[part].append(
                {**json.loads(p.stdout.strip().splitlines()[-1]), "loadavg_1min_before": load}
            )
    med = {k: sorted(v, key=lambda d: d["cpu_s"])[len(v) // 2] for k, v in runs.items()}
    pairs = [e["tok_per_cpu_s"] / g["tok_per_cpu_s"] for e, g in zip(runs["engine"], runs["generate"])]
    pairs_wall = [e["tok_s"] / g["tok_s"] for e, g in zip(runs["engine"], runs["generate"])]
    loads = [d["loadavg_1min_before"] for v in runs.values() for d in v]
    print(
        f"model {args.model} ({med['engine']['dtype']}), {args.dataset}: {args.prompts} prompts x {args.repeats} repeats, "
        f"batch {args.batch_size}, T={args.temperature}, max_new_tokens={args.max_new_tokens}, no top-k/top-p; "
        f"{platform.machine()}, {os.cpu_count()} cores visible, {args.threads} torch thread(s); torch "
        f"{med['engine']['torch']}; {args.runs} alternating runs; 1-min load before runs "
        f"{min(loads):.1f}-{max(loads):.1f}\n"
    )
    print(
        "| side | tokens (median run) | wall s | tokens/s | CPU s | tokens/CPU-s |\n|---|---|---|---|---|---|"
    )
    for name, d in (
        ("transformers `generate` (batched, sampling, no coupling)", med["generate"]),
        ("engine (coupled keyed noise, continuous batching)", med["engine"]),
    ):
        print(
            f"| {name} | {d['tokens']} | {d['seconds']:.1f} | {d['tok_s']:.1f} | {d['cpu_s']:.1f} | {d['tok_per_cpu_s']:.1f} |"
        )
    print(
        "\nper run, tokens/CPU-s engine / generate: "
        + ", ".join(f"{x:.2f}x" for x in pairs)
        + f" (median {statistics.median(pairs):.2f}x); wall: "
        + ", ".join(f"{x:.2f}x" for x in pairs_wall)
        + "\nCPU s, engine: "
        + ", ".join(f"{d['cpu_s']:.1f}" for d in runs["engine"])
        + "; generate: "
        + ", ".join(f"{d['cpu_s']:.1f}" for d in runs["generate"])
        + "\ntokens, engine: "
        + ", ".join(str(d["tokens"]) for d in runs["engine"])
        + "; generate: "
        + ", ".join(str(d["tokens"]) for d in runs["generate"])
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "runs": runs,
                    "median": med,
                    "pair_ratio_cpu": pairs,
                    "pair_ratio_wall": pairs_wall,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
