"""The CPU Gumbel-argmax (engine.sampling.cpu_argmax, numba) against the torch reference, one thread.

    .venv/bin/python bench/bench_cpu_argmax.py                 # batch 64; 49,152 and 128,256 vocabularies
    .venv/bin/python bench/bench_cpu_argmax.py --cold          # also the first call's compile time (fresh cache)

What is timed, per (batch, vocabulary, logits, T), on the same input:

* ``reference``  torch.argmax(z + noise.gumbel(seeds, units, steps, keys)), z = float32(logits) / T
                 (what engine.sampling.keyed.draw computes on CPU today, without its extras)
* ``numba``      cpu_argmax.gumbel_argmax_cpu (identical tokens: checked every run)
* ``numba+prob`` a sampler step: the tokens plus the chosen token's probability exp(z[tok] - logsumexp(z)),
                 as keyed.draw computes it on CPU (one pass of the kernel per row: the division by T
                 and the logsumexp inside it, no (R, V) tensor)
* ``unfused``    the same step with z = logits / T and torch's logsumexp(z) as (R, V) passes around the
                 argmax (the layout before the sum moved into the kernel)

Logits: ``uniform`` = randn * 0.5 (a random-init model: every token near the maximum, the worst case
for the pruning) and ``peaked`` = randn * 5. Medians of --reps after one warm-up call, wall clock
(perf_counter) and the thread's CPU time (thread_time: the part a busy shared machine does not inflate).
The 1-minute load average is printed with the table: compare rows of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _smoke import SMOKE_HELP


def _inputs(R: int, V: int, scale: float, seed: int = 0):
    import torch

    from engine.sampling import noise

    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(R, V, generator=gen) * scale  # (R, V)
    seeds = noise.seed_tensor([seed * 1000 + i for i in range(R)])
    units = noise.unit_keys([(f"p{i}", i % 4) for i in range(R)])
    steps = torch.arange(R, dtype=torch.int64) % 32
    return logits, seeds, units, steps, torch.arange(V, dtype=torch.int64)


def _time(fn, reps: int) -> tuple[float, float]:
    """(median wall ms, median thread-CPU ms) of ``reps`` calls after one warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    return 1e3 * statistics.median(wall), 1e3 * statistics.median(cpu)


def _row(R: int, V: int, kind: str, T: float, reps: int) -> dict:
    import torch

    from engine.sampling import keyed, noise
    from engine.sampling.cpu_argmax import gumbel_argmax_cpu, gumbel_argmax_detail

    logits, seeds, units, steps, keys = _inputs(R, V, 0.5 if kind == "uniform" else 5.0)

    def reference():
        z = logits / T if T != 1.0 else logits
        return torch.argmax(z + noise.gumbel(seeds, units, steps, keys), dim=-1)

    def with_prob():
        d = keyed._draw_chunk_cpu(logits, seeds, units, steps, keys, T, 0, 1.0, 0)
        return d.tokens, d.probs

    def unfused():
        z = logits / T if T != 1.0 else logits
        tok = gumbel_argmax_cpu(z, seeds, units, steps, keys, 1.0)
        return tok, (z.gather(1, tok[:, None]).squeeze(1) - torch.logsumexp(z, dim=-1)).exp()

    d = gumbel_argmax_detail(logits, seeds, units, steps, keys, T)
    if not torch.equal(d.tokens, reference()):
        raise SystemExit(f"tokens differ from the reference at R={R} V={V} {kind} T={T}")
    ref_w, ref_c = _time(reference, max(1, reps // 3))
    nb_w, nb_c = _time(lambda: gumbel_argmax_cpu(logits, seeds, units, steps, keys, T), reps)
    pr_w, pr_c = _time(with_prob, reps)
    un_w, un_c = _time(unfused, reps)
    return {
        "batch": R,
        "vocab": V,
        "logits": kind,
        "T": T,
        "reference_ms": ref_w,
        "reference_cpu_ms": ref_c,
        "numba_ms": nb_w,
        "numba_cpu_ms": nb_c,
        "numba_prob_ms": pr_w,
        "numba_prob_cpu_ms": pr_c,
        "unfused_ms": un_w,
        "unfused_cpu_ms": un_c,
        "evaluated_per_row": float(d.evaluated.float().mean()),
        "fallback_rows": int(d.fallback.sum()),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--vocab", default="49152,128256", help="comma-separated vocabulary sizes")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument(
        "--cold", action="store_true", help="compile into a fresh numba cache first and time it"
    )
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.cold and "engine.sampling._cpu_argmax_kernels" not in sys.modules:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(
            prefix="bench_numba_"
        )  # read when numba is imported
    import torch

    from engine.sampling.cpu_argmax import gumbel_argmax_cpu, numba_available

    if not numba_available():
        print("numba is not importable here: nothing to time (pip install -r requirements.txt)")
        return 0
    torch.set_num_threads(1)  # as engine.sampling.keyed.draw on CPU
    t0 = time.perf_counter()
    gumbel_argmax_cpu(*_inputs(2, 10, 1.0), 0.7)  # compile, or load numba's cache
    first = time.perf_counter() - t0
    vocabs = [500] if args.smoke else [int(v) for v in args.vocab.split(",")]
    batch, reps = (4, 1) if args.smoke else (args.batch, args.reps)
    rows = [
        _row(batch, V, kind, T, reps)
        for V in vocabs
        for kind in ("uniform", "peaked")
        for T in (0.7, 1.0)
    ]
    print(
        f"first call (compile{' into a fresh cache' if args.cold else ' or cache load'}): {first:.2f} s; "
        f"1-min load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; torch threads {torch.get_num_threads()}"
    )
    print(
        "| batch | vocab | logits | T | reference ms (cpu) | numba ms (cpu) | numba+prob ms (cpu) | "
        "unfused ms (cpu) | speed-up | exact logs per row |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['batch']} | {r['vocab']:,} | {r['logits']} | {r['T']} | {r['reference_ms']:.1f} "
            f"({r['reference_cpu_ms']:.1f}) | {r['numba_ms']:.2f} ({r['numba_cpu_ms']:.2f}) | "
            f"{r['numba_prob_ms']:.2f} ({r['numba_prob_cpu_ms']:.2f}) | "
            f"{r['unfused_ms']:.2f} ({r['unfused_cpu_ms']:.2f}) | "
            f"{r['reference_cpu_ms'] / max(r['numba_cpu_ms'], 1e-9):.1f}x | {r['evaluated_per_row']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"first_call_s": first, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
