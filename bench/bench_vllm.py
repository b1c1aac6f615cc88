"""vLLM backend vs the transformers loop: identical-unit share, near-ties and speed at a larger size.

    $VLLM_VENV/bin/python bench/bench_vllm.py                                # SmolLM2, demo, CPU
    $VLLM_VENV/bin/python bench/bench_vllm.py --models smollm2-135m smollm2-135m-int8 \\
        --dataset demo --repeats 10 --max-new-tokens 20 --out vllm_bench.json
    # on a GPU machine (vllm==0.32.x CUDA build in the venv), e.g. a 1B-8B HF folder:
    $VLLM_VENV/bin/python bench/bench_vllm.py --models /models/Llama-3.2-1B-Instruct --device cuda
    # tensor parallelism (the processor then runs in vLLM's rank processes; traces via TraceSink):
    $VLLM_VENV/bin/python bench/bench_vllm.py --models /models/Llama-3.1-70B-Instruct --device cuda \
        --tensor-parallel 4 --skip-hf

Per model: both backends generate the same (prompt, repeat, mode) units with the same seed; the
script reports wall seconds, generated tokens/s, the share of units whose tokens are identical and,
per differing unit, the first differing step (the near-tie evidence is computed by
tests/vllm/test_vllm_equivalence.py; here only counts). With two models or more it also reports
each backend's coupled and independent agreement rates between the first two models.
``--skip-hf`` times vLLM alone (large models on GPU, where the transformers loop is the slow side).

``--overhead`` (docs/BENCHMARKS.md, coupled vLLM): coupled vs plain vLLM on the first model (a local folder, e.g. a
random Llama from bench/make_random_llama.py), like with like: the same process mode (engine core
in this process), dtype, ``max_num_seqs = --batch``, prompts (the same token ids) and new tokens;
reports tokens/s of each, the coupled processor's time per step (CUDA events on a GPU) and its
share of the generation, and peak GPU memory.

    .venv-vllm/bin/python bench/make_random_llama.py /tmp/llama-oh --hidden 512 --intermediate 1024 \
        --layers 4 --heads 8 --kv-heads 4      # head size 64: vLLM's CPU attention supports it
    .venv-vllm/bin/python bench/bench_vllm.py --overhead --models /tmp/llama-oh --batch 64 --max-new-tokens 8 --eager

``--smoke``: the overhead mode on a throw-away 1-layer random Llama, 4 rows, 3 tokens (seconds of
generation after the engine build); prints "skipped" where vLLM is not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
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
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "smollm2-135m-int8"])
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default=None, help="both backends (default: the engine's default)")
    ap.add_argument(
        "--device", default="cpu", help="transformers backend device (vLLM uses its build's)"
    )
    ap.add_argument("--kv-cache-gib", type=float, default=2.0, help="CPU only")
    ap.add_argument(
        "--eager", action="store_true", help="vLLM enforce_eager (no torch.compile / CUDA graphs)"
    )
    ap.add_argument("--tensor-parallel", type=int, default=1, help="vLLM tensor_parallel_size")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--out", default=None, help="write the JSON report here")
    ap.add_argument(
        "--overhead", action="store_true", help="coupled vs plain vLLM (see the module docstring)"
    )
    ap.add_argument("--batch", type=int, default=64, help="--overhead: rows (max_num_seqs and prompts)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="--overhead: timed generations per engine (medians reported; each engine warm)",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny --overhead run; skipped without vLLM")
    ap.add_argument(
        "--reference-draw",
        action="store_true",
        help="CPU: draw with the torch reference noise instead of the numba Gumbel-argmax "
        "(engine.sampling.cpu_argmax), for an A/B on one machine (same tokens)",
    )
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="--overhead: keep both engines and alternate their rounds (coupled, plain, coupled, ...), "
        "so that a changing machine load reaches both alike",
    )
    ap.add_argument(
        "--ab-workers",
        action="store_true",
        help="--overhead --interleave: each round also runs coupled with one draw worker "
        "($COUPLED_EVAL_DRAW_WORKERS=1, the previous code's draw), an A/B in one process",
    )
    ap.add_argument(
        "--ab-unfused",
        action="store_true",
        help="--overhead --interleave: each round also runs coupled with the CPU draw's division by T and "
        "logsumexp as (R, V) torch passes around the same numba argmax (the layout before they "
        "moved into the kernel's row pass), an A/B in one process",
    )
    a = ap.parse_args(argv)
    if a.reference_draw:  # the engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
        from engine.sampling import keyed

        keyed._cpu_argmax_available = lambda device: False  # type: ignore[assignment]
    if a.smoke:
        return smoke(a)
    if a.overhead:
        report = overhead_interleaved(a) if a.interleave else overhead(a)
        print(json.dumps(report, indent=1))
        if a.out:
            Path(a.out).write_text(json.dumps(report, indent=1))
        return

    import numpy as np

    from engine import models
    from engine.generation import GenConfig, as_units, generate_units
    from engine.generation.vllm_backend import VllmBackend
    from engine.sampling import noise
    from engine.tasks import datasets

    ds = datasets.load_dataset(a.dataset, limit=a.limit)
    prompts = {p.prompt_id: p.user_prompt for p in ds.prompts}
    cfg = GenConfig(
        temperature=a.temperature, max_new_tokens=a.max_new_tokens, batch_size=32, trace_top_k=5
    )
    base = [(p, r) for p in prompts for r in range(a.repeats)]
    report = {
        "machine": f"{platform.node()} {platform.processor()} cpus={os.cpu_count()}",
        "command": " ".join(sys.argv),
        "units_per_model": 2 * len(base),
        "models": {},
    }
    outs = {}
    for name in a.models:
        units = base + base
        seeds = [a.seed] * len(base) + [noise.independent_seed(a.seed, name)] * len(base)
        row = {}
        hf = None
        if not a.skip_hf:
            lm = models.load_model(name, device=a.device, dtype=a.dtype)
            t = time.perf_counter()
            hf = generate_units(lm, prompts, units, seeds, cfg, system_prompt=ds.system_prompt)
            row["hf_s"] = time.perf_counter() - t
            row["hf_tok_s"] = sum(len(r.token_ids) for r in hf) / row["hf_s"]
            del lm
            gc.collect()
        t = time.perf_counter()
        kw = {"enforce_eager": True} if a.eager else {}
        if a.tensor_parallel != 1:
            kw["tensor_parallel_size"] = a.tensor_parallel
        be = VllmBackend(name, dtype=a.dtype, kv_cache_gib=a.kv_cache_gib, engine_kwargs=kw)
        row["vllm_build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        got = {
            (r.prompt_id, r.repeat, r.seed): r
            for ch in be.generate(prompts, as_units(units, seeds), cfg, system_prompt=ds.system_prompt)
            for r in ch
        }
        vl = [got[(p, r, s)] for (p, r), s in zip(units, seeds)]
        row["vllm_s"] = time.perf_counter() - t
        row["vllm_tok_s"] = sum(len(r.token_ids) for r in vl) / row["vllm_s"]
        row["describe"] = be.describe()
        be.close()
        del be
        gc.collect()
        if hf is not None:
            same = [h.token_ids == v.token_ids for h, v in zip(hf, vl)]
            row["identical_share"] = float(np.mean(same))
            row["first_diff_steps"] = [
                next(
                    i for i, (x, y) in enumerate(zip(h.token_ids + (-1,), v.token_ids + (-2,))) if x != y
                )
                for h, v, s in zip(hf, vl, same)
                if not s
            ]
        outs[name] = (hf, vl)
        report["models"][name] = row
        print(name, json.dumps(row), flush=True)
    if len(a.models) >= 2:
        m0, m1 = a.models[:2]
        n = len(base)
        for k, label in ((1, "vllm"), (0, "transformers")):
            if outs[m0][k] is None:
                continue
            x, y = outs[m0][k], outs[m1][k]
            report[f"agreement_{label}"] = {
                "coupled": float(np.mean([u.token_ids == v.token_ids for u, v in zip(x[:n], y[:n])])),
                "independent": float(
                    np.mean([u.token_ids == v.token_ids for u, v in zip(x[n:], y[n:])])
                ),
            }
    print(json.dumps({k: v for k, v in report.items() if k != "models"}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))


def _apply_timer(cuda: bool):
    """Wrap the processor's apply with a timer: CUDA events on a GPU (no host sync in the step),
    perf_counter on CPU. Returns (per-call seconds getter, restore)."""
    import torch

    from engine.generation import vllm_processor as VP

    orig, marks = VP.KeyedGumbelProcessor.apply, []

    def timed(self, logits, ctx=None):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            out = orig(self, logits, ctx)
            e.record()
            marks.append((s, e))
        else:
            t = time.perf_counter()
            out = orig(self, logits, ctx)
            marks.append(time.perf_counter() - t)
        return out

    def seconds() -> list[float]:
        if cuda:
            torch.cuda.synchronize()
            return [s.elapsed_time(e) / 1e3 for s, e in marks]
        return list(marks)

    def restore() -> None:
        VP.KeyedGumbelProcessor.apply = orig

    VP.KeyedGumbelProcessor.apply = timed
    return seconds, marks.clear, restore


def overhead(a) -> dict:
    """Coupled vs plain vLLM, like with like (see the module docstring)."""
    import torch
    import vllm
    from vllm import SamplingParams

    from engine.generation import GenConfig, as_units
    from engine.generation.vllm_backend import VllmBackend, _scoped_env

    folder, B, N = a.models[0], a.batch, a.max_new_tokens
    cuda = torch.cuda.is_available()
    prompts = {f"p{i}": f"Question {i}: what is {i} plus {2 * i}? Answer briefly." for i in range(B)}
    units = [(p, 0) for p in prompts]
    cfg = GenConfig(temperature=a.temperature, max_new_tokens=N, batch_size=B, trace_top_k=0)
    kw = {"max_num_seqs": B, **({"enforce_eager": True} if a.eager else {})}
    seconds, clear, restore = _apply_timer(cuda)
    try:
        be = VllmBackend(folder, dtype=a.dtype, kv_cache_gib=a.kv_cache_gib, engine_kwargs=kw)
        dtype, ids = be.dtype, be._prompt_ids(prompts, [(p, 0, 0) for p in prompts], cfg, None)
        list(be.generate(prompts, as_units(units[:2], a.seed), GenConfig(max_new_tokens=2)))  # warm-up
        clear()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        coupled_runs, proc = [], []
        for _ in range(max(1, a.rounds)):
            t = time.perf_counter()
            tokens = sum(
                len(r.token_ids) for ch in be.generate(prompts, as_units(units, a.seed), cfg) for r in ch
            )
            coupled_runs.append(time.perf_counter() - t)
            proc.append(sum(seconds()))
            calls = len(seconds())
            clear()
        coupled_s = statistics.median(coupled_runs)
        peak_coupled = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        be.close()
        del be
        gc.collect()
    finally:
        restore()
    env = {"VLLM_CPU_KVCACHE_SPACE": str(max(1, int(a.kv_cache_gib)))} if not cuda else {}
    with _scoped_env(env):
        llm = vllm.LLM(model=str(folder), dtype=dtype, enable_prefix_caching=True, seed=0, **kw)
    reqs = [{"prompt_token_ids": ids[p]} for p, _ in units]
    llm.generate(reqs[:2], SamplingParams(max_tokens=2), use_tqdm=False)  # warm-up
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    plain_runs = []
    for _ in range(max(1, a.rounds)):
        t = time.perf_counter()
        res = llm.generate(reqs, SamplingParams(temperature=a.temperature, max_tokens=N), use_tqdm=False)
        plain_runs.append(time.perf_counter() - t)
    plain_s = statistics.median(plain_runs)
    plain_tokens = sum(len(o.outputs[0].token_ids) for o in res)
    peak_plain = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return {
        "machine": f"{platform.node()} cpus={os.cpu_count()} load1={os.getloadavg()[0]:.1f}",
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "vllm": vllm.__version__,
        "dtype": dtype,
        "batch": B,
        "max_new_tokens": N,
        "temperature": a.temperature,
        "command": " ".join(sys.argv),
        "cpu_draw": "reference" if a.reference_draw else "auto (numba where it imports)",
        "coupled": {
            "tokens": tokens,
            "seconds": coupled_s,
            "tok_s": tokens / coupled_s,
            "rounds_s": coupled_runs,
            "processor_calls": calls,
            "processor_ms_per_step": 1e3 * statistics.median(proc) / max(1, calls),
            "processor_share": statistics.median(p / s for p, s in zip(proc, coupled_runs)),
            "peak_gib": peak_coupled,
        },
        "plain": {
            "tokens": plain_tokens,
            "seconds": plain_s,
            "tok_s": plain_tokens / plain_s,
            "rounds_s": plain_runs,
            "peak_gib": peak_plain,
        },
        "coupled_over_plain": (tokens / coupled_s) / (plain_tokens / plain_s),
    }


def overhead_interleaved(a) -> dict:
    """:func:`overhead` with both engines alive and their rounds alternated (and, with ``--ab-workers``,
    a coupled round on one draw worker in each cycle): load changes reach every arm alike."""
    import vllm
    from vllm import SamplingParams

    from engine.generation import GenConfig, as_units
    from engine.generation.vllm_backend import VllmBackend, _scoped_env
    from engine.sampling.keyed import WORKERS_ENV

    folder, B, N = a.models[0], a.batch, a.max_new_tokens
    prompts = {f"p{i}": f"Question {i}: what is {i} plus {2 * i}? Answer briefly." for i in range(B)}
    units = [(p, 0) for p in prompts]
    cfg = GenConfig(temperature=a.temperature, max_new_tokens=N, batch_size=B, trace_top_k=0)
    kw = {"max_num_seqs": B, **({"enforce_eager": True} if a.eager else {})}
    seconds, clear, restore = _apply_timer(False)
    arms: dict[str, dict] = {"coupled": {"runs": [], "proc": []}, "plain": {"runs": []}}
    if a.ab_workers:
        arms["coupled_1_worker"] = {"runs": [], "proc": []}
    if a.ab_unfused:
        arms["coupled_unfused"] = {"runs": [], "proc": []}
    load = [os.getloadavg()[0]]
    try:
        be = VllmBackend(folder, dtype=a.dtype, kv_cache_gib=a.kv_cache_gib, engine_kwargs=kw)
        dtype, ids = be.dtype, be._prompt_ids(prompts, [(p, 0, 0) for p in prompts], cfg, None)
        env = {"VLLM_CPU_KVCACHE_SPACE": str(max(1, int(a.kv_cache_gib)))}
        with _scoped_env(env):
            llm = vllm.LLM(model=str(folder), dtype=dtype, enable_prefix_caching=True, seed=0, **kw)
        reqs = [{"prompt_token_ids": ids[p]} for p, _ in units]
        list(
            be.generate(
                prompts,
                as_units(units[:2], a.seed),
                GenConfig(temperature=a.temperature, max_new_tokens=2),
            )
        )
        llm.generate(
            reqs[:2], SamplingParams(max_tokens=2), use_tqdm=False
        )  # warm-up (numba loaded above)
        clear()
        tokens: dict[str, list] = {}
        for _ in range(max(1, a.rounds)):
            for arm in arms:
                t = time.perf_counter()
                if arm == "plain":
                    res = llm.generate(
                        reqs, SamplingParams(temperature=a.temperature, max_tokens=N), use_tqdm=False
                    )
                    arms[arm]["runs"].append(time.perf_counter() - t)
                    arms[arm]["tokens"] = sum(len(o.outputs[0].token_ids) for o in res)
                    continue
                with (
                    _scoped_env({WORKERS_ENV: "1"} if arm == "coupled_1_worker" else {}),
                    _unfused_draw(arm == "coupled_unfused"),
                ):
                    out = [r for ch in be.generate(prompts, as_units(units, a.seed), cfg) for r in ch]
                arms[arm]["runs"].append(time.perf_counter() - t)
                arms[arm]["proc"].append(sum(seconds()))
                arms[arm]["calls"] = len(seconds())
                arms[arm]["tokens"] = sum(len(r.token_ids) for r in out)
                tokens[arm] = sorted((r.prompt_id, r.token_ids) for r in out)
                clear()
            load.append(os.getloadavg()[0])
        be.close()
    finally:
        restore()
    rep: dict = {
        "machine": f"{platform.node()} cpus={os.cpu_count()}",
        "load1_per_cycle": load,
        "vllm": vllm.__version__,
        "dtype": dtype,
        "batch": B,
        "max_new_tokens": N,
        "temperature": a.temperature,
        "command": " ".join(sys.argv),
        "interleaved": True,
        "cpu_draw": "reference" if a.reference_draw else "auto (numba where it imports)",
    }
    for arm, d in arms.items():
        s = statistics.median(d["runs"])
        rep[arm] = {"tokens": d["tokens"], "seconds": s, "tok_s": d["tokens"] / s, "rounds_s": d["runs"]}
        if "proc" in d:
            rep[arm]["processor_calls"] = d["calls"]
            rep[arm]["processor_ms_per_step"] = 1e3 * statistics.median(d["proc"]) / max(1, d["calls"])
            rep[arm]["processor_share"] = statistics.median(p / s for p, s in zip(d["proc"], d["runs"]))
    plain = rep["plain"]["tok_s"]
    for arm in arms:
        if arm != "plain":
            rep[f"{arm}_over_plain"] = rep[arm]["tok_s"] / plain
            # per cycle (each coupled round against the plain round next to it): the spread under load
            rep[f"{arm}_over_plain_per_cycle"] = [
                p / c for c, p in zip(arms[arm]["runs"], arms["plain"]["runs"])
            ]
    if a.ab_workers:
        rep["tokens_identical_1_worker_vs_default"] = tokens["coupled"] == tokens["coupled_1_worker"]
    if a.ab_unfused:
        rep["tokens_identical_unfused_vs_default"] = tokens["coupled"] == tokens["coupled_unfused"]
    return rep


@contextlib.contextmanager
def _unfused_draw(on: bool):
    """With ``on``: keyed.draw's numba CPU chunks with z = masked_logits as an (R, V) tensor, the argmax
    over z at T = 1 and torch's logsumexp of z (as before the division and the sum moved into the
    kernel's row pass; the argmax kernel itself is today's); the same tokens, probabilities to float32
    rounding. The engine core runs in this process, so the patch reaches the processor."""
    if not on:
        yield
        return
    import torch

    from engine.sampling import keyed
    from engine.sampling.cpu_argmax import gumbel_argmax_cpu
    from engine.sampling.gumbel import masked_logits

    def previous(logits, seeds, units, steps, token_keys, temperature, top_k, top_p, trace_k):
        z = masked_logits(logits, temperature, top_k, top_p)  # (r, V)
        tokens = gumbel_argmax_cpu(z, seeds, units, steps, token_keys, 1.0)
        lse = torch.logsumexp(z, dim=-1)
        probs = (z.gather(1, tokens[:, None]).squeeze(1) - lse).exp()
        assert not trace_k  # the bench asks for no trace
        return keyed.Draw(tokens, probs, None, None, None)

    current = keyed._draw_chunk_cpu
    keyed._draw_chunk_cpu = previous  # type: ignore[assignment]
    try:
        yield
    finally:
        keyed._draw_chunk_cpu = current  # type: ignore[assignment]


def smoke(a) -> None:
    """A tiny --overhead run (checks the script end to end); skipped where vLLM is not installed."""
    import tempfile

    from engine.generation.vllm_checks import installed_vllm_version

    if installed_vllm_version() is None:
        print("skipped: vLLM is not installed here (scripts/install_vllm.sh)")
        return
    import make_random_llama

    with tempfile.TemporaryDirectory() as d:
        make_random_llama.main(
            [
                d,
                "--hidden",
                "128",
                "--intermediate",
                "256",
                "--layers",
                "1",
                "--heads",
                "2",
                "--kv-heads",
                "1",
            ]
        )
        a.models, a.batch, a.max_new_tokens, a.eager, a.kv_cache_gib = [d], 4, 3, True, 1.0
        print(json.dumps(overhead(a), indent=1))


if __name__ == "__main__":
    main()
