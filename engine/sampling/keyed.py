"""Keyed Gumbel-max draws: the one sampling entry point of both backends (docs/METHODS.md 1.2-1.3).

    T_i = argmax_v ( z_i[v] + g(seed_i, unit_i, step_i, key_v) ),   z_i = float32(logits_i) / T, masked

(z + g is log D + g shifted by one constant per row: the same argmax, the same distribution; see
engine.sampling.gumbel). The transformers loop (engine.generation.hf_batch) and the vLLM logits
processor (engine.generation.vllm_sampler) both call :func:`draw`, which picks the implementation by
device and settings:

* CUDA with Triton, no top-k / top-p, no trace, T > 0: the single-read kernel
  (engine.sampling.triton_noise.gumbel_argmax_logits) on the raw logits: one read of each row in its own
  dtype, the argmax of z + g and an online logsumexp in registers, two values written per row; no (R, V)
  float32 copy, no x / T tensor, no log-softmax, no noise tensor (docs/BENCHMARKS.md, coupled vLLM).
* CUDA with Triton and top-k / top-p or a trace: z masked in torch, then the fused Gumbel-argmax
  kernel over z (no (R, V) noise tensor). A trace's Gumbel values at the top-k ids come from
  :func:`engine.sampling.noise.gumbel_at` on an (R, k) grid.
* CPU with numba, T > 0: engine.sampling.cpu_argmax, which reads the raw logits once (the division by
  T, the argmax and the logsumexp inside one loop; no (R, V) tensor) unless a top-k / top-p mask or a
  trace needs z = masked_logits, which it then reads instead.
* elsewhere (and T = 0): the torch reference (engine.sampling.noise.gumbel) and torch.argmax.

All give the same tokens by construction (the kernels are bit-identical to the reference noise,
divide with IEEE rounding and add in float32 with torch.argmax's tie rule; tests/test_noise_kernel.py).
The probability of the token is exp(z[token] - logsumexp(z)): the same formula everywhere, equal to
float32 rounding across implementations (the kernels sum in another order; the numba CPU draw sums
in float64 and rounds once, so its value is the closest of all to the exact one).

Bounded temporaries: rows are drawn in chunks of :func:`rows_per_chunk`, so the extra memory of a
draw is a fixed budget (``TEMP_BUDGET_BYTES``) whatever the batch size; every operation is per
row, so the result does not depend on the chunking (tests/test_sampling.py).

CPU threads (:func:`cpu_threads`): the reference noise is ~20 elementwise passes per column chunk,
each its own OpenMP fork/join (~2,000 per step at B = 64, V = 128,256). When any other process
shares the cores, every join waits for a descheduled thread: on the 2-core VM a step that costs
~100 ms of arithmetic on one thread took 0.7-4.7 s on two (docs/BENCHMARKS.md, vLLM CPU). So a CPU
draw runs on one intra-op thread by default; ``$COUPLED_EVAL_NOISE_THREADS`` = N gives it N (a
dedicated many-core CPU server). Speed only: the bits never depend on it.

Row workers (:func:`cpu_draw_workers`): with the numba Gumbel-argmax, a CPU draw splits its rows over
W threads (the caller and W - 1 pool threads, each on one intra-op thread; numba and torch release
the GIL): one hand-off and one join per draw, not one per elementwise pass, so a descheduled thread
costs one scheduler slice at most. W defaults to the intra-op threads torch was given (vLLM: the
cores it bound; capped at 8 and at the CPUs this process may use); ``$COUPLED_EVAL_DRAW_WORKERS`` = W
overrides (1 = the caller alone). Every operation is per row, so the bits do not depend on W
(tests/test_keyed_draw.py ``test_draw_does_not_depend_on_the_row_workers``).

Imports nothing outside engine.sampling (and engine.errors).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import NamedTuple

import torch

from engine.errors import UserError
from engine.sampling import noise
from engine.sampling.gumbel import check_params, masked_logits, scale

TEMP_BUDGET_BYTES = 256 << 20  # peak extra memory of one draw, whatever the number of rows
THREADS_ENV = "COUPLED_EVAL_NOISE_THREADS"  # intra-op threads of a CPU draw (default 1)
WORKERS_ENV = (
    "COUPLED_EVAL_DRAW_WORKERS"  # row workers of a numba CPU draw (default: torch's threads, <= 8)
)
MAX_WORKERS = 8
MIN_ROWS_PER_WORKER = 4  # fewer rows: not worth a hand-off


class Draw(NamedTuple):
    """What one sampling step of R rows produced; device tensors (nothing copied to the host)."""

    tokens: torch.Tensor  # (R,) int64 sampled token ids
    probs: torch.Tensor  # (R,) float32 D[token]
    top_ids: torch.Tensor | None  # (R, k) int64 top-k of log D, most likely first (k = trace_k)
    top_probs: torch.Tensor | None  # (R, k) float32 their probabilities
    top_gumbels: torch.Tensor | None  # (R, k) float32 their Gumbel values; None when T = 0 or k = 0


def _fused_available(device: torch.device) -> bool:
    """The fused kernels run on CUDA tensors when Triton imports and they passed the first-use check
    (engine.sampling.kernel_check: the torch formula's tokens on this device). Why not on CPU:
    triton_noise would then run in Triton's interpreter (numpy, slow); importing triton on CPU also
    fixes its mode."""
    if device.type != "cuda":
        return False
    from engine.sampling.triton_noise import triton_importable

    if not triton_importable():
        return False
    from engine.sampling.kernel_check import kernels_agree

    # compiled kernels decide samples only after they matched the torch formula on this device
    return kernels_agree(
        str(
            torch.device(
                device.type, device.index if device.index is not None else torch.cuda.current_device()
            )
        )
    )


def _cpu_argmax_available(device: torch.device) -> bool:
    """The numba Gumbel-argmax (engine.sampling.cpu_argmax: the reference's tokens, with the float64
    logs for the few tokens per row that can still win) runs on CPU tensors when numba imports;
    elsewhere the torch reference. Why: the reference is ~20 elementwise passes per token and took
    ~60 ms per step at B = 64, V = 49,152, against ~10-15 ms for vLLM's whole CPU sampler."""
    if device.type != "cpu":
        return False
    from engine.sampling.cpu_argmax import numba_available

    return numba_available()


def cpu_draw_threads() -> int:
    """Intra-op threads of a draw on CPU: ``$COUPLED_EVAL_NOISE_THREADS`` (an integer >= 1), default
    1."""
    env = os.environ.get(THREADS_ENV, "").strip()
    if env and (not env.isdigit() or int(env) < 1):
        raise UserError(f"${THREADS_ENV} must be an integer >= 1, got {env!r}")
    return int(env) if env else 1


def cpu_draw_workers(rows: int) -> int:
    """Row workers of a numba CPU draw of ``rows`` rows: ``$COUPLED_EVAL_DRAW_WORKERS`` (an integer >=
    1), default the intra-op threads torch was given, at most :data:`MAX_WORKERS` and the CPUs this
    process may run on; never more than one per :data:`MIN_ROWS_PER_WORKER` rows."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env and (not env.isdigit() or int(env) < 1):
        raise UserError(f"${WORKERS_ENV} must be an integer >= 1, got {env!r}")
    if env:
        w = int(env)
    else:
        cpus = (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        )
        w = min(torch.get_num_threads(), cpus, MAX_WORKERS)
    return max(1, min(w, rows // MIN_ROWS_PER_WORKER))


_POOL: ThreadPoolExecutor | None = None
_POOL_PID = (
    0  # the process that made _POOL: a forked child (vLLM workers) inherits it without its threads
)
_POOL_LOCK = threading.Lock()


def _one_thread(fn: Callable[[], Draw]) -> Draw:
    """Run ``fn`` in a pool thread on one intra-op thread (a new thread starts with torch's count)."""
    if torch.get_num_threads() != 1:
        torch._C.set_num_threads(1)
    return fn()


def _run_parallel(jobs: list[Callable[[], Draw]], workers: int) -> list[Draw]:
    """The jobs' results in order: the caller runs every ``workers``-th job, the pool the others."""
    global _POOL, _POOL_PID
    if workers <= 1 or len(jobs) <= 1:
        return [j() for j in jobs]
    with _POOL_LOCK:
        if (
            _POOL is None or _POOL_PID != os.getpid() or _POOL._max_workers < workers - 1
        ):  # grows, never shrinks
            _POOL = ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="coupled-draw")
            _POOL_PID = os.getpid()
        pool = _POOL
    futures = {i: pool.submit(_one_thread, j) for i, j in enumerate(jobs) if i % workers}
    mine = {i: j() for i, j in enumerate(jobs) if not i % workers}
    return [mine[i] if i in mine else futures[i].result() for i in range(len(jobs))]


@contextmanager
def cpu_threads(device: torch.device) -> Iterator[None]:
    """Run the block with :func:`cpu_draw_threads` intra-op threads (CPU only; restored after).

    torch._C's setter, not ``torch.set_num_threads``: vLLM's CPU worker replaces the latter with a
    no-op after binding its OpenMP threads to cores; shrinking the team and growing it back reuses
    those bound threads."""
    n = cpu_draw_threads() if device.type == "cpu" else None
    old = torch.get_num_threads()  # (vLLM replaces only the setter)
    if n is None or n >= old:  # never more threads than torch (or vLLM's binding) was given
        yield
        return
    torch._C.set_num_threads(n)
    try:
        yield
    finally:
        torch._C.set_num_threads(old)


def keyed_noise(
    seed: torch.Tensor, unit_keys: torch.Tensor, step: torch.Tensor, token_keys: torch.Tensor
) -> torch.Tensor:
    """Keyed noise (B, V) float32: the fused Triton kernel on CUDA, the torch reference elsewhere
    (same bits; see engine.sampling.triton_noise for the float64 ``log`` caveat)."""
    if _fused_available(token_keys.device):
        from engine.sampling.triton_noise import gumbel_triton

        return gumbel_triton(seed, unit_keys, step, token_keys)
    return noise.gumbel(seed, unit_keys, step, token_keys)


def bytes_per_row(
    vocab: int, top_p: float, fused: bool, gathered: bool = False, single_read: bool = False
) -> int:
    """Peak temporary bytes one row of :func:`draw` needs (float32 = 4 bytes per token).

    The single-read kernel: none (it keeps O(BLOCK) values in registers and writes 12 bytes of
    output per row). The torch paths: z = masked x / T (4 V), then either the noise stage (g and
    z + g, 8 V) or the logsumexp of z (z - max and its exp, 8 V), never both at once (12 V);
    top-p adds a log-softmax and a sort (values, int64 order, cumsum, mask, scatter: 29 V); the
    reference noise's own column chunks add at most 4 V; gathering the rows out of a larger logits
    tensor adds their copy (4 V).
    """
    if single_read:
        return 0
    per = 12 + (29 if top_p < 1.0 else 0) + (0 if fused else 4) + (4 if gathered else 0)
    return per * vocab


def rows_per_chunk(
    vocab: int,
    top_p: float = 1.0,
    fused: bool = False,
    budget: int = TEMP_BUDGET_BYTES,
    gathered: bool = False,
    single_read: bool = False,
) -> int:
    """How many rows one chunk of :func:`draw` may hold within ``budget`` bytes (at least 1)."""
    return max(1, budget // max(1, bytes_per_row(vocab, top_p, fused, gathered, single_read)))


def _raw_logits_suffice(vocab: int, top_k: int, top_p: float, trace_k: int) -> bool:
    """No top-k / top-p mask (top-k >= V masks nothing) and no trace (a trace needs the top-k of z): a
    kernel can then read the raw logits, dividing by T as it goes, and no z tensor is needed."""
    return (top_k == 0 or top_k >= vocab) and top_p >= 1.0 and trace_k == 0


def single_read(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, trace_k: int
) -> bool:
    """Whether :func:`draw` takes the single-read kernel: float32 / bfloat16 / float16 logits on CUDA
    with Triton, T > 0, no top-k / top-p (top-k >= V masks nothing), no trace (a trace needs the
    top-k of z, a torch pass)."""
    return (
        temperature > 0
        and _raw_logits_suffice(logits.shape[-1], top_k, top_p, trace_k)
        and logits.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and _fused_available(logits.device)
    )


def _draw_chunk_cpu(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    trace_k: int,
) -> Draw:
    """The numba draw (T > 0): tokens and logsumexp(z) from the logits without an (r, V) tensor when
    nothing is masked and no trace is asked for (the kernel divides by T as it reads); otherwise from
    z = masked_logits (T = 1 for the kernel). Why: on CPU each (r, V) float32 pass (x / T, torch's
    logsumexp and its temporaries) cost as much as the draw itself (docs/BENCHMARKS.md, vLLM CPU)."""
    from engine.sampling.cpu_argmax import gumbel_argmax_lse

    plain = _raw_logits_suffice(logits.shape[-1], top_k, top_p, trace_k)
    z = None if plain else masked_logits(logits, temperature, top_k, top_p)  # (r, V) float32
    src, t = (logits, temperature) if z is None else (z, 1.0)
    tokens, lse = gumbel_argmax_lse(src, seeds, units, steps, token_keys, t)  # (r,) int64, (r,) float64
    z_tok = (
        scale(logits.gather(1, tokens[:, None]), temperature)
        if z is None
        else z.gather(1, tokens[:, None])
    )
    probs = (z_tok.squeeze(1).double() - lse).exp().float()  # (r,) D[token], float64 then rounded once
    if not trace_k:
        return Draw(tokens, probs, None, None, None)
    assert z is not None  # a trace takes the masked path
    tv, ti = torch.topk(
        z, min(trace_k, z.shape[-1]), dim=-1
    )  # (r, k) the most likely: top-k of z = of log D
    tp = (tv.double() - lse[:, None]).exp().float()  # (r, k) the same formula as probs
    return Draw(tokens, probs, ti, tp, noise.gumbel_at(seeds, units, steps, token_keys[ti]))


def _draw_chunk(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    trace_k: int,
    fused: bool,
    cpu_fast: bool = False,
) -> Draw:
    if cpu_fast and temperature > 0:
        return _draw_chunk_cpu(
            logits, seeds, units, steps, token_keys, temperature, top_k, top_p, trace_k
        )
    z = masked_logits(logits, temperature, top_k, top_p)  # (r, V) float32, the one conversion
    g = None
    if temperature == 0:
        tokens = torch.argmax(z, dim=-1)  # (r,) greedy: no noise
    elif fused:
        from engine.sampling.triton_noise import gumbel_argmax_fused

        tokens, _ = gumbel_argmax_fused(z, seeds, units, steps, token_keys, backend="triton")
    else:
        g = noise.gumbel(seeds, units, steps, token_keys)  # (r, V)
        tokens = torch.argmax(z + g, dim=-1)  # (r,) -inf + g stays -inf; ties -> lowest id
        if not trace_k:
            g = None  # free it before the logsumexp's temporaries
    lse = torch.logsumexp(z, dim=-1)  # (r,) log of D's normaliser; -inf for a row of -inf
    probs = (z.gather(1, tokens[:, None]).squeeze(1) - lse).exp()  # (r,) D[token]
    if not trace_k:
        return Draw(tokens, probs, None, None, None)
    tv, ti = torch.topk(
        z, min(trace_k, z.shape[-1]), dim=-1
    )  # (r, k) the most likely: top-k of z = of log D
    tg = None
    if temperature > 0:
        tg = g.gather(1, ti) if g is not None else noise.gumbel_at(seeds, units, steps, token_keys[ti])
    return Draw(tokens, probs, ti, (tv - lse[:, None]).exp(), tg)


def draw(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    trace_k: int = 0,
    rows: torch.Tensor | None = None,
    budget: int = TEMP_BUDGET_BYTES,
) -> Draw:
    """The keyed Gumbel-max sample of R rows, with their step records, in bounded memory.

    Same tokens as ``engine.sampling.sample(logits, noise.gumbel(...), T, top_k, top_p).tokens``;
    T = 0 is greedy (no noise, no Gumbel values). On CUDA without top-k / top-p / trace, the
    single-read kernel takes all R rows at once (no temporaries, so no chunks).

    Args:
        logits: (R, V) next-token logits, any float dtype (cast to float32 per chunk).
        seeds: (R,) int64 seed bits; units: (R,) int64 unit keys; steps: (R,) int64 step indices;
            all on ``logits.device``.
        token_keys: (V,) int64 token keys on ``logits.device``.
        temperature, top_k, top_p: as engine.sampling.sample.
        trace_k: how many most likely tokens to record per row (0 = none).
        rows: optional (R,) int64 rows of ``logits`` to draw (gathered per chunk, so the copy is
            within the budget too); seeds, units, steps then have one entry per selected row.
        budget: peak temporary bytes (rows are drawn in chunks of :func:`rows_per_chunk`).

    Returns:
        Draw of device tensors.
    """
    check_params(temperature, top_k, top_p)
    R, V = (logits.shape[0] if rows is None else rows.shape[0]), logits.shape[1]
    if single_read(logits, temperature, top_k, top_p, trace_k):
        from engine.sampling.triton_noise import gumbel_argmax_logits

        tok, prob = gumbel_argmax_logits(
            logits, seeds, units, steps, token_keys, temperature, rows=rows, backend="triton"
        )  # reads each drawn row once, writes 2 R values
        return Draw(tok, prob, None, None, None)
    fused = temperature > 0 and _fused_available(logits.device)
    cpu_fast = temperature > 0 and not fused and _cpu_argmax_available(logits.device)
    workers = cpu_draw_workers(R) if cpu_fast else 1  # concurrent chunks share the budget
    n = rows_per_chunk(
        V, top_p, fused or cpu_fast, budget // workers, gathered=rows is not None
    )  # no noise held
    if workers > 1:
        n = min(n, -(-R // workers))  # at least one chunk per worker

    def chunk(a: int) -> Draw:
        x = (
            logits[a : a + n] if rows is None else logits[rows[a : a + n]]
        )  # (r, V); a copy only when gathered
        return _draw_chunk(
            x,
            seeds[a : a + n],
            units[a : a + n],
            steps[a : a + n],
            token_keys,
            temperature,
            top_k,
            top_p,
            trace_k,
            fused,
            cpu_fast,
        )

    with cpu_threads(logits.device):
        parts = _run_parallel(
            [partial(chunk, a) for a in range(0, max(R, 1), n)], workers
        )  # R = 0: one chunk
    if len(parts) == 1:
        return parts[0]

    def cat(col: tuple) -> torch.Tensor | None:
        return torch.cat(col) if col[0] is not None else None

    tokens, probs, top_ids, top_probs, top_gumbels = (cat(col) for col in zip(*parts))
    assert tokens is not None and probs is not None  # every chunk has them
    return Draw(tokens, probs, top_ids, top_probs, top_gumbels)


def keyed_scores(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The scores whose argmax is :func:`draw`'s token, as (R, V) tensors (the readable form of the
    sampler, for tests and for checking one step by hand; :func:`draw` never builds them).

    s = z + g with z = masked_logits(logits, T, top_k, top_p) and g = noise.gumbel(seed, unit, step,
    token_keys); s = z when T = 0 (greedy). Masked tokens are -inf in s. s is log D + g shifted by
    logsumexp(z), one constant per row, so argmax s is the Gumbel-max sample of D; the float32 sum
    z + g is the product's formula (argmax ties to the lowest id).

    Returns:
        (scores (R, V) float32, log D (R, V) float32, g (R, V) float32 or None when T = 0).
    """
    z = masked_logits(logits, temperature, top_k, top_p)  # (R, V) float32
    logp = torch.log_softmax(z, dim=-1)  # (R, V)
    if temperature == 0:
        return z, logp, None
    g = noise.gumbel(seeds, units, steps, token_keys.to(z.device))  # (R, V)
    return z + g, logp, g


__all__ = [
    "THREADS_ENV",
    "WORKERS_ENV",
    "cpu_draw_threads",
    "cpu_draw_workers",
    "cpu_threads",
    "Draw",
    "keyed_scores",
    "TEMP_BUDGET_BYTES",
    "bytes_per_row",
    "draw",
    "keyed_noise",
    "rows_per_chunk",
    "single_read",
]
