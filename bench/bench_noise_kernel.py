"""Keyed noise + Gumbel-max sampling per decode step: torch reference vs the fused Triton kernels.

    .venv/bin/python bench/bench_noise_kernel.py                       # CPU: batch 32, 49,152 vocabulary
    python3 bench/bench_noise_kernel.py --device cuda --hbm-gbps 3350  # GPU: batch 256, 128,256 (Llama 3)
    python3 bench/bench_noise_kernel.py --device cuda --measure-model llama-3.2-1b --context 200

What is timed (one decode step of the engine's sampler, logits already float32 (B, V)):

* ``noise torch``      engine.sampling.noise.gumbel (the reference: ~20 int64/float64 elementwise passes)
* ``noise triton``     engine.sampling.triton_noise.gumbel_triton (one pass; CUDA only)
* ``sample torch``     engine.sampling.sample(logits, g, T) + the engine's per-step extras
                       (probability of the chosen token; with --trace-top-k, top-k ids, probs, g's)
* ``step torch``       noise torch + sample torch: what engine.generation does per step today
* ``step triton``      noise triton + sample torch
* ``step fused``       masked_logprobs + gumbel_argmax_fused (noise never written) + chosen prob
* ``step single-read``  gumbel_argmax_logits: one read of the logits, token + probability per row
                       (what keyed.draw takes on CUDA without top-k / top-p / trace)

The share of a decode step: against the roofline step time of Llama-3.2-1B / 3B / 3.1-8B in bf16
(bench/llama_shapes.py: weights + KV of batch x context positions over --hbm-gbps), and against a
measured forward of a random-weight model of that shape when --measure-model is given.
Timing: CUDA events (median of --reps after --warmup); on CPU, perf_counter medians (1 thread by
default: the dev machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _timer(dev):
    import torch

    if dev.type == "cuda":

        def run(fn, warmup, reps):
            for _ in range(warmup):
                fn()
            ts = []
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                ts.append(a.elapsed_time(b) / 1e3)
            return statistics.median(ts), ts
    else:

        def run(fn, warmup, reps):
            for _ in range(warmup):
                fn()
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            return statistics.median(ts), ts

    return run


def _measure_forward(
    shape_name: str, batch: int, context: int, dev, timer, warmup: int, reps: int
) -> float:
    """Median seconds of one decode forward (B new tokens over a KV cache of ``context`` positions)."""
    import torch
    from llama_shapes import SHAPES, random_model
    from transformers import DynamicCache

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = random_model(SHAPES[shape_name], dev, dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, 1000, (batch, context), generator=gen).to(dev)
    with torch.inference_mode():
        cache = DynamicCache()
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = torch.randint(0, 1000, (batch, 1), generator=gen).to(dev)
        pos = torch.full((batch, 1), context, device=dev)

        def step(model=model, cache=cache):
            model(input_ids=nxt, past_key_values=cache, use_cache=True, position_ids=pos)
            for layer in cache.layers:  # drop the column just written: every rep sees the same context
                layer.keys, layer.values = layer.keys[:, :, :context], layer.values[:, :, :context]

        med, _ = timer(step, warmup, reps)
    del step, model, cache
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return med


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--batch", type=int, default=None, help="rows (default 256 on CUDA, 32 on CPU)")
    ap.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="vocabulary width (default 128,256 on CUDA, 49,152 on CPU)",
    )
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument(
        "--trace-top-k", type=int, default=0, help="also time the trace extras (top-k ids/probs/g)"
    )
    ap.add_argument(
        "--hbm-gbps",
        type=float,
        default=3350.0,
        help="HBM bandwidth for the roofline (H100 SXM 3350, H200 4800)",
    )
    ap.add_argument(
        "--context", type=float, default=200.0, help="mean KV positions per row for the roofline"
    )
    ap.add_argument(
        "--measure-model",
        default=None,
        help="comma list of shapes (llama-3.2-1b,llama-3.2-3b,llama-3.1-8b,tiny) to time a real forward",
    )
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default 50 CUDA, 7 CPU)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one repetition: checks the script runs (seconds)",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.batch, args.vocab, args.reps, args.warmup, args.measure_model = (
            args.batch or 4,
            args.vocab or 1000,
            1,
            0,
            None,
        )

    import torch
    from llama_shapes import SHAPES, roofline_step_s

    from engine.sampling import keyed, noise
    from engine.sampling import triton_noise as nt
    from engine.sampling.gumbel import masked_logprobs, sample

    torch.set_num_threads(args.threads)
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = dev.type == "cuda"
    B = args.batch or (256 if cuda else 32)
    V = args.vocab or (128_256 if cuda else 49_152)
    reps = args.reps or (50 if cuda else 7)
    timer = _timer(dev)
    gen = torch.Generator(device="cpu").manual_seed(0)
    logits = (torch.randn(B, V, generator=gen) * 3).to(
        dev
    )  # (B, V) float32, as after the engine's .float()
    uk = noise.unit_keys([(f"q{i // 10}", i % 10) for i in range(B)]).to(dev)  # (B,)
    steps = (torch.arange(B) % 20).to(dev)  # (B,) rows at different steps (continuous batching)
    keys = torch.arange(V, device=dev)  # (V,)
    k, T = args.trace_top_k, args.temperature
    use_triton = cuda and nt.triton_importable()

    def extras(s, g):  # the engine's per-step extras (generation._stream.sample_rows)
        p_tok = s.logprobs.gather(1, s.tokens[:, None]).squeeze(1).exp()  # (B,)
        if k:
            tv, ti = torch.topk(s.logprobs, k, dim=-1)
            return p_tok, tv.exp(), g.gather(1, ti)
        return p_tok

    g_ref = noise.gumbel(0, uk, steps, keys)
    seeds_t = noise.seed_tensor([0] * B, device=dev)  # (B,) the same seed as the int 0 above
    assert torch.equal(
        keyed.draw(logits, seeds_t, uk, steps, keys, T).tokens, sample(logits, g_ref, T).tokens
    )
    variants = {
        "noise torch (reference)": lambda: noise.gumbel(0, uk, steps, keys),
        "sample torch (masked log-softmax, argmax, chosen prob)": lambda: extras(
            sample(logits, g_ref, T), g_ref
        ),
        "step torch = noise torch + sample torch": lambda: extras(
            sample(logits, g := noise.gumbel(0, uk, steps, keys), T), g
        ),
        # what both backends call (engine.sampling.keyed.draw): fused kernel on CUDA, reference elsewhere,
        # rows in chunks within keyed.TEMP_BUDGET_BYTES
        "step draw = engine.sampling.keyed.draw (both backends)": lambda: keyed.draw(
            logits, seeds_t, uk, steps, keys, T, trace_k=k
        ),
    }
    if use_triton:
        buf = torch.empty(B, V, dtype=torch.float32, device=dev)
        variants["noise triton (fused kernel)"] = lambda: nt.gumbel_triton(0, uk, steps, keys, out=buf)
        variants["step triton = noise triton + sample torch"] = lambda: extras(
            sample(logits, g := nt.gumbel_triton(0, uk, steps, keys, out=buf), T), g
        )

        def fused():
            logp = masked_logprobs(logits, T)
            tok, _ = nt.gumbel_argmax_fused(logp, 0, uk, steps, keys)
            return logp.gather(1, tok[:, None]).exp()

        variants["step fused = log-softmax + Gumbel-argmax kernel (no noise tensor)"] = fused
        variants["step single-read = gumbel_argmax_logits (one read of the logits)"] = (
            lambda: nt.gumbel_argmax_logits(logits, seeds_t, uk, steps, keys, T)
        )
        # correctness on this device before timing: same bits, same tokens
        assert torch.equal(
            nt.gumbel_triton(0, uk, steps, keys).view(torch.int32), g_ref.view(torch.int32)
        ), "Triton noise differs from the torch reference on this device"
        lp = masked_logprobs(logits, T)
        assert torch.equal(
            nt.gumbel_argmax_fused(lp, 0, uk, steps, keys)[0], torch.argmax(lp + g_ref, -1)
        )
        assert torch.equal(
            nt.gumbel_argmax_logits(logits, seeds_t, uk, steps, keys, T)[0],
            sample(logits, g_ref, T).tokens,
        )
    results = {}
    for name, fn in variants.items():
        med, ts = timer(fn, args.warmup, reps)
        results[name] = {"median_s": med, "all_s": ts}

    measured = {}
    if args.measure_model:
        for m in args.measure_model.split(","):
            measured[m] = _measure_forward(
                m.strip(), B, int(args.context), dev, timer, args.warmup, max(5, reps // 5)
            )

    machine = (
        torch.cuda.get_device_name(dev)
        if cuda
        else f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, {args.threads} torch thread(s)"
    )
    print(
        f"device {dev} ({machine}); torch {torch.__version__}; batch {B}, vocabulary {V:,}, T={T}, "
        f"trace top-k {k}; median of {reps} after {args.warmup} warm-up; 1-min load {os.getloadavg()[0]:.1f}\n"
    )
    print("| what | ms per decode step |\n|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['median_s'] * 1e3:.2f} |")
    if not use_triton:
        print("\n(Triton variants need CUDA and triton: not timed on this device)")
    step_names = [n for n in results if n.startswith("step")]
    if not cuda:
        print(
            "\n(CPU timings: the shares of a GPU's roofline step below are printed for the record only; "
            "they compare a CPU sampler with a GPU forward)"
        )
    print(
        f"\nShare of a decode step at batch {B}, {args.context:g} KV positions per row, bf16, roofline at "
        f"{args.hbm_gbps:g} GB/s"
        + (" (vocabulary here is not 128,256: scale with care)" if V != 128_256 else "")
        + ":\n"
    )
    print(
        "| model | roofline step (ms) | "
        + " | ".join(f"{n.split(' =')[0]} share" for n in step_names)
        + " |"
    )
    print("|---|---|" + "---|" * len(step_names))
    roof = {}
    for key in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"):
        sh = SHAPES[key]
        t = roofline_step_s(sh, B, args.context, args.hbm_gbps)
        roof[key] = t
        shares = []
        for n in step_names:
            x = results[n]["median_s"]
            shares.append(f"{x / (t + x):.1%}")
        print(f"| {sh.name} | {t * 1e3:.2f} | " + " | ".join(shares) + " |")
    if measured:
        print(
            "\nMeasured decode forward (random weights) and the sampler's share of forward + sampler:\n"
        )
        print(
            "| model | forward (ms) | "
            + " | ".join(f"{n.split(' =')[0]} share" for n in step_names)
            + " |"
        )
        print("|---|---|" + "---|" * len(step_names))
        for m, t in measured.items():
            shares = [f"{results[n]['median_s'] / (t + results[n]['median_s']):.1%}" for n in step_names]
            print(f"| {m} | {t * 1e3:.2f} | " + " | ".join(shares) + " |")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "device": machine,
                    "batch": B,
                    "vocab": V,
                    "results": results,
                    "roofline_step_s": roof,
                    "measured_forward_s": measured,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
