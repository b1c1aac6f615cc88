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
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
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
    ap.add_argument("--device", default="cpu", help="transformers backend device (vLLM uses its build's)")
    ap.add_argument("--kv-cache-gib", type=float, default=2.0, help="CPU only")
    ap.add_argument("--eager", action="store_true", help="vLLM enforce_eager (no torch.compile / CUDA graphs)")
    ap.add_argument("--tensor-parallel", type=int, default=1, help="vLLM tensor_parallel_size")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--out", default=None, help="write the JSON report here")
    a = ap.parse_args(argv)

    import numpy as np

    from engine import models
    from engine.generation import GenConfig, as_units, generate_units
    from engine.generation.vllm_backend import VllmBackend
    from engine.sampling import noise
    from engine.tasks import datasets

    ds = datasets.load_dataset(a.dataset, limit=a.limit)
    prompts = {p.prompt_id: p.user_prompt for p in ds.prompts}
    cfg = GenConfig(temperature=a.temperature, max_new_tokens=a.max_new_tokens, batch_size=32, trace_top_k=5)
    base = [(p, r) for p in prompts for r in range(a.repeats)]
    report = {"machine": f"{platform.node()} {platform.processor()} cpus={os.cpu_count()}",
              "command": " ".join(sys.argv), "units_per_model": 2 * len(base), "models": {}}
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
        got = {(r.prompt_id, r.repeat, r.seed): r
               for ch in be.generate(prompts, as_units(units, seeds), cfg, system_prompt=ds.system_prompt) for r in ch}
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
            row["first_diff_steps"] = [next(i for i, (x, y) in enumerate(zip(h.token_ids + (-1,), v.token_ids + (-2,)))
                                            if x != y) for h, v, s in zip(hf, vl, same) if not s]
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
                "independent": float(np.mean([u.token_ids == v.token_ids for u, v in zip(x[n:], y[n:])]))}
    print(json.dumps({k: v for k, v in report.items() if k != "models"}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
