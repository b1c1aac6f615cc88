"""Generation tokens/s of random-weight Llama-3.2-1B / 3B / 3.1-8B (bf16) per backend, vs the roofline,
and the paper's MMLU workload extrapolated to wall time on one GPU.

    python3 bench/bench_gpu_generation.py --device cuda --hbm-gbps 3350          # H100 SXM, all models
    python3 bench/bench_gpu_generation.py --models llama-3.2-1b --backends hf,hf-triton
    .venv/bin/python bench/bench_gpu_generation.py --tiny                         # CPU smoke test

Backends (each (model, backend) runs in its own child process, so GPU memory and failures stay apart):

* ``hf``          engine.generation.iter_generate (our transformers loop, keyed noise forced to the torch
                  reference engine.sampling.noise.gumbel), LoadedModel from engine.models.from_objects
* ``hf-triton``   the same loop as it runs on CUDA by default (engine.sampling.keyed.draw: the fused
                  Gumbel-argmax kernel, no (B, V) noise tensor): the kernel's end-to-end effect
* ``vllm``        the coupled vLLM backend (engine.generation.vllm_backend.VllmBackend, imported lazily; skipped
                  with a message when it or vLLM is missing), weights random (load_format="dummy")
* ``vllm-plain``  plain vLLM sampling without our logits processor: the overhead of coupling

Workload: ``--prompts`` synthetic prompts of ``--prompt-tokens`` tokens (a character-level tokenizer
with a 128,256-wide vocabulary, bench/llama_shapes.py: every sampled id decodes), each generated
``--repeats`` times in both modes (coupled seed and the model's independent seed, like a run),
``--max-new-tokens`` at temperature ``--temperature``, batch ``--batch``. Random weights almost never
sample EOS, so every unit generates max_new_tokens: a fixed, comparable amount of work.

Roofline tokens/s = batch / ((weights + KV bytes per step) / --hbm-gbps) (bench/llama_shapes.py),
the decode bound with prefill ignored. MMLU extrapolation: 14,042 questions x 10 repeats x 2 modes
(coupled + independent) = 280,840 generations per model x --mmlu-tokens tokens each (default 20 =
the maximum; trained models stop earlier on a letter answer, so this is an upper bound) / measured
tokens/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BACKENDS = ("hf", "hf-triton", "vllm", "vllm-plain")
MMLU_QUESTIONS, MMLU_REPEATS = 14_042, 10
MMLU_SYSTEM = (
    "You will be given multiple choice questions. Please reply with a single character 'A', 'B', "
    "'C', or 'D' only. DO NOT explain your reply."
)


def _prompts(n: int, length: int, seed: int = 0) -> dict[str, str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz     "))
    return {f"p{i}": "".join(rng.choice(letters, size=length)) for i in range(n)}


def _save_model_dir(shape, tok, path: Path) -> None:
    """config.json + tokenizer (+ generation config): what vLLM needs with load_format="dummy"."""
    from transformers import GenerationConfig

    cfg = shape.config(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.torch_dtype = "bfloat16"
    cfg.save_pretrained(path)
    tok.save_pretrained(path)
    GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id).save_pretrained(path)


def _child(args) -> dict:
    import torch
    from llama_shapes import SHAPES, bench_tokenizer, random_model

    from engine import generation as G
    from engine import models
    from engine.sampling import noise

    torch.set_num_threads(args.threads)
    shape = SHAPES[args.model]
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    tok = bench_tokenizer(shape.vocab)
    prompts = _prompts(args.prompts, args.prompt_tokens)
    units = [(p, r) for p in prompts for r in range(args.repeats)]
    indep = noise.independent_seed(args.seed, shape.name)
    all_units, seeds = (
        units + units,
        [args.seed] * len(units) + [indep] * len(units),
    )  # coupled + independent
    cfg = G.GenConfig(
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch,
        trace_top_k=args.trace_top_k,
        record_traces=bool(args.trace_top_k),
    )
    plen = [
        len(
            tok(G.chat_text(tok, G.prompt_messages(u, MMLU_SYSTEM)), add_special_tokens=False)[
                "input_ids"
            ]
        )
        for u in prompts.values()
    ]
    out = {
        "model": shape.name,
        "backend": args.backend,
        "units": len(all_units),
        "device": str(dev),
        "prompt_tokens_mean": sum(plen) / len(plen),
        "gpu": torch.cuda.get_device_name(dev) if cuda else None,
        "torch": torch.__version__,
    }

    if args.backend in ("hf", "hf-triton"):
        from engine.sampling import keyed

        if args.backend == "hf-triton":
            from engine.sampling import triton_noise as nt

            if not (cuda and nt.triton_importable()):
                return {**out, "skipped": "hf-triton needs CUDA and triton"}
            # the loop's default on CUDA: engine.sampling.keyed.draw's fused Gumbel-argmax
        else:  # force the torch reference noise (the pre-kernel path) for the run
            keyed._fused_available = lambda device: False  # type: ignore[assignment]
        dtype = torch.bfloat16 if cuda else torch.float32
        model = random_model(
            shape,
            dev,
            dtype,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        lm = models.from_objects(
            shape.name, model, tok, variant="random-" + str(dtype).removeprefix("torch.")
        )
        G.generate_units(
            lm,
            prompts,
            units[:2],
            args.seed,
            G.GenConfig(max_new_tokens=2, batch_size=2),
            system_prompt=MMLU_SYSTEM,
        )  # warm-up (kernels, allocator)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        t = time.perf_counter()
        tokens = 0
        for chunk in G.iter_generate(lm, prompts, all_units, seeds, cfg, None, MMLU_SYSTEM):
            tokens += sum(len(r.token_ids) for r in chunk)
        sync()
        secs = time.perf_counter() - t
        return {
            **out,
            "tokens": tokens,
            "seconds": secs,
            "tok_s": tokens / secs,
            "dtype": str(dtype),
            "cuda_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        }

    # vLLM backends: a model folder with config + tokenizer; random weights via load_format="dummy"
    try:
        import vllm
    except Exception as exc:
        return {**out, "skipped": f"vLLM is not importable here ({type(exc).__name__}: {exc})"}
    kw = {
        "load_format": "dummy",
        "max_num_seqs": args.batch,
        "gpu_memory_utilization": args.gpu_mem_util,
    }
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / shape.name
        _save_model_dir(shape, tok, path)
        if args.backend == "vllm":
            try:
                from engine.generation import vllm_backend as VB
            except Exception as exc:
                return {
                    **out,
                    "skipped": f"engine.generation.vllm_backend is not importable ({type(exc).__name__}: {exc})",
                }
            be = VB.VllmBackend(path, dtype="bfloat16" if cuda else "float32", engine_kwargs=kw)
            list(
                be.generate(
                    prompts,
                    G.as_units(units[:2], args.seed),
                    G.GenConfig(max_new_tokens=2),
                    None,
                    MMLU_SYSTEM,
                )
            )
            sync()
            t = time.perf_counter()
            tokens = 0
            for chunk in be.generate(prompts, G.as_units(all_units, seeds), cfg, None, MMLU_SYSTEM):
                tokens += sum(len(r.token_ids) for r in chunk)
            sync()
            secs = time.perf_counter() - t
            be.close()
        else:
            from vllm import LLM, SamplingParams

            llm = LLM(
                model=str(path),
                dtype="bfloat16" if cuda else "float32",
                enable_prefix_caching=True,
                seed=0,
                **kw,
            )
            texts = {p: G.chat_text(tok, G.prompt_messages(u, MMLU_SYSTEM)) for p, u in prompts.items()}
            sp = SamplingParams(temperature=args.temperature, max_tokens=args.max_new_tokens)
            llm.generate([texts[p] for p, _ in units[:2]], SamplingParams(max_tokens=2), use_tqdm=False)
            t = time.perf_counter()
            res = llm.generate([texts[p] for p, _ in all_units], sp, use_tqdm=False)
            secs = time.perf_counter() - t
            tokens = sum(len(o.outputs[0].token_ids) for o in res)
        return {
            **out,
            "tokens": tokens,
            "seconds": secs,
            "tok_s": tokens / secs,
            "vllm": vllm.__version__,
        }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama-3.2-1b,llama-3.2-3b,llama-3.1-8b")
    ap.add_argument(
        "--backends",
        default="hf,hf-triton,vllm,vllm-plain",
        help=f"comma list of {', '.join(BACKENDS)}; missing ones are skipped with a message",
    )
    ap.add_argument(
        "--tiny",
        "--smoke",
        dest="tiny",
        action="store_true",
        help="CPU smoke test: the tiny shape, few units, small batch (overrides sizes)",
    )
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument(
        "--prompt-tokens",
        type=int,
        default=150,
        help="user-prompt length (the template and MMLU system prompt add ~150 more)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument(
        "--trace-top-k", type=int, default=0, help="0 = traces off (an MMLU-size run's default)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (CPU runs)")
    ap.add_argument("--hbm-gbps", type=float, default=3350.0, help="H100 SXM 3350, H200 4800 (GB/s)")
    ap.add_argument("--gpu-mem-util", type=float, default=0.85, help="vLLM gpu_memory_utilization")
    ap.add_argument(
        "--mmlu-tokens",
        type=float,
        default=None,
        help="mean generated tokens per MMLU unit for the extrapolation (default: --max-new-tokens)",
    )
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None, help="also write the markdown table to this file")
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--backend", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tiny:
        args.models, args.batch, args.prompts, args.repeats, args.prompt_tokens = "tiny", 8, 4, 2, 40
        args.max_new_tokens = min(args.max_new_tokens, 6)
        args.device = args.device or "cpu"
        if "--backends" not in (argv if argv is not None else sys.argv[1:]):
            args.backends = "hf"  # one child process (each imports torch): the script's path, in seconds
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.backend:  # child
        print(json.dumps(_child(args)))
        return 0

    from llama_shapes import SHAPES, roofline_step_s

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in backends if b not in BACKENDS]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad += [m for m in models if m not in SHAPES]
    if bad:
        ap.error(
            f"unknown backend/model {bad}; backends: {', '.join(BACKENDS)}; models: {', '.join(SHAPES)}"
        )
    rows = []
    passthrough = [
        a for a in (argv if argv is not None else sys.argv[1:]) if a not in ("--tiny", "--smoke")
    ]
    for m in models:
        for b in backends:
            cmd = [
                sys.executable,
                __file__,
                *passthrough,
                "--model",
                m,
                "--backend",
                b,
                "--models",
                args.models,
                "--batch",
                str(args.batch),
                "--prompts",
                str(args.prompts),
                "--repeats",
                str(args.repeats),
                "--prompt-tokens",
                str(args.prompt_tokens),
                "--max-new-tokens",
                str(args.max_new_tokens),
                "--device",
                args.device,
            ]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)}
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            if p.returncode != 0:
                tail = (p.stderr.strip().splitlines() or ["(no stderr)"])[-1]
                rows.append({"model": SHAPES[m].name, "backend": b, "error": tail[-300:]})
                print(f"{m} / {b}: FAILED: {tail[-300:]}", file=sys.stderr)
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r["child_wall_s"] = time.perf_counter() - t0
            if "skipped" in r:
                print(f"{m} / {b}: skipped: {r['skipped']}", file=sys.stderr)
            rows.append({**r, "shape": m})

    n_mmlu = MMLU_QUESTIONS * MMLU_REPEATS * 2
    mt = args.mmlu_tokens or args.max_new_tokens
    # KV positions per row during decode: the templated prompt (measured in the child) + half the answer
    plens = [r["prompt_tokens_mean"] for r in rows if "prompt_tokens_mean" in r]
    context = (plens[0] if plens else args.prompt_tokens + 160) + args.max_new_tokens / 2
    lines = [
        f"Batch {args.batch}; {args.prompts} prompts x {args.repeats} repeats x 2 modes (coupled + independent); "
        f"{context - args.max_new_tokens / 2:.0f} prompt tokens (chat template + MMLU system prompt + {args.prompt_tokens} user); {args.max_new_tokens} new tokens; T={args.temperature}; "
        f"roofline at {args.hbm_gbps:g} GB/s with {context:.0f} KV positions per row; "
        f"MMLU = {n_mmlu:,} generations x {mt:g} tokens per model.",
        "",
        "| model | backend | tokens | wall s | tokens/s | roofline tokens/s | % of roofline | MMLU workload (h) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    total: dict[str, float] = {}
    for r in rows:
        if "tok_s" not in r:
            lines.append(
                f"| {r['model']} | {r['backend']} | - | - | {r.get('skipped') or 'failed: ' + r.get('error', '')} | | | |"
            )
            continue
        sh = SHAPES[r["shape"]]
        roof = args.batch / roofline_step_s(sh, args.batch, context, args.hbm_gbps)
        hours = n_mmlu * mt / r["tok_s"] / 3600
        r.update(roofline_tok_s=roof, mmlu_hours=hours)
        total[r["backend"]] = total.get(r["backend"], 0.0) + hours
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['tokens']:,} | {r['seconds']:.1f} | {r['tok_s']:,.0f} | "
            f"{roof:,.0f} | {r['tok_s'] / roof:.1%} | {hours:.2f} |"
        )
    if len(models) > 1:
        lines.append("")
        lines += [
            f"MMLU workload, all {len(models)} models, backend {b}: {h:.2f} h on one GPU"
            for b, h in total.items()
        ]
    dev_desc = (
        next((r.get("gpu") for r in rows if r.get("gpu")), None)
        or f"CPU ({platform.machine()}, {os.cpu_count()} cores visible, {args.threads} torch thread(s))"
    )
    lines.insert(
        0, f"Machine: {dev_desc}; torch {next((r.get('torch') for r in rows if r.get('torch')), '?')}."
    )
    text = "\n".join(lines)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "rows": rows,
                    "mmlu_generations_per_model": n_mmlu,
                    "mmlu_tokens_per_generation": mt,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
