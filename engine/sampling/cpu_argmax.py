"""An exact Gumbel-argmax on CPU (numba) that evaluates the float64 logs for very few tokens.

The sampler (docs/METHODS.md 1.2-1.3) picks, per row r,

    tokens[r] = argmax_v fl32( z[r, v] + g[r, v] ),   z = float32(logits) / T (no division at T = 1)
    g = engine.sampling.noise.gumbel(seed, unit, step, token_keys)       float32 (float64 then rounded)

with torch.argmax's rules: ties -> the lowest id, -inf entries never win, a row of -inf -> 0.
The torch reference runs ~22 elementwise int64/float64 passes per element (the splitmix64 hash with
logical shifts done as shift + and, then two float64 logs): ~60 ms per step at batch 64 and a
49,152 vocabulary on one core. Here one fused native loop hashes every token (integers only, AVX2
vectorised) and computes the two logs only for the few tokens that can still win.

Exact pruning. With q = h >>> 11 (53 bits) and u = q 2^-53, let w = 2^53 - q, an integer in [1, 2^53].
Since -log u >= 1 - u = w 2^-53,

    g = -log(-log u) <= log(2^53 / w)                    (also for q = 0, where u is the clamp ``tiny``)

so a token can reach the running best score ``best`` only if z + log(2^53 / w) >= best - margin, i.e.

    log2 w <= reach - (zmax - z) log2 e,     reach = 53 + (zmax - best + margin) log2 e.

Per token the kernel tests the weaker floor(log2 w) <= floor(that), as "w >> (floor + 1) == 0" (one
float32 multiply-add, one conversion, one per-lane shift: vectorised; it passes at most twice as
many tokens as the exact bound), and computes the exact g only for tokens that pass. ``best`` starts
at zmax + G_MIN, a lower bound of the row's best score (the most likely token has g >= -6.5630,
u = tiny), and rises with every exact score. The expected number of exact evaluations per row is
about 2 log(V / 256) + log 256 on near-uniform logits and fewer on peaked ones: 5-20 of 49,152
(tests/test_cpu_argmax.py checks the fraction).

Why the result is the reference's token, bit for bit. The kernel's scores are float64, z + g, with
numba's (libm's) ``log``; the reference rounds g to float32 and adds in float32. With M = |zmax| + 64,
for every token that can matter (z >= zmax - 44): |fl32(g) - g| <= 2^-19 (|g| < 64),
|fl32(z + fl32(g)) - (z + fl32(g))| <= 2^-24 M, the two libraries' float64 logs differ by a few ulps
(1e-14), and the test's float32 arithmetic on (xmax - x) / T and ``reach`` is off by at most
2^-23 M + 2^-17 (in nats). Every comparison uses

    margin = 2^-10 + 2^-20 M        (more than 10x the sum of those, twice over)

so (1) a pruned token's reference score is below the best token's reference score (float rounding is
monotone), and (2) every token whose float64 score is within ``margin`` of the kernel's best is
returned as a *candidate* (usually exactly one). The winner among the candidates is chosen in torch
with :func:`engine.sampling.noise.gumbel_at` (the reference's own torch ops, so the same float32
noise) and the reference's float32 z + g, the lowest id first among equal scores. A row with more than
``MAX_CANDIDATES`` candidates (many exact ties: duplicate token keys with equal logits), or without a
finite maximum (all -inf, +inf or NaN), is drawn by the reference itself.

One pass of memory per row. Rows are taken one at a time: the row's maximum (in integers, NaN-aware:
torch.amax's value) reads it from memory, then the scan and, for :func:`gumbel_argmax_lse`, the sum
of e^(z - zmax) (float32 exponentials in a vectorised loop, summed in float64) find it in L2. So a
sampler step reads the logits once and writes no (R, V) tensor: no x / T, no torch logsumexp and
its temporaries, which on CPU cost as much as the draw (docs/BENCHMARKS.md, vLLM CPU).

Single-threaded itself (no ``parallel=True``: numba's own thread pool would contend with the OpenMP
threads vLLM binds to the cores); ``nogil``, so engine.sampling.keyed.draw runs row chunks of it on
several Python threads at once (its row workers: one hand-off per draw). Compiled on first use, then
cached on disk by numba: in ``__pycache__`` next to the kernels, else in ``$NUMBA_CACHE_DIR`` or
numba's per-user cache folder (a read-only install), else in a fresh temporary folder (nothing
writable: compiled once per process).

Imports nothing outside engine.sampling but numpy / numba / torch; numba is optional
(:func:`numba_available`; callers fall back to the reference).
"""

from __future__ import annotations

import functools
import tempfile
from typing import Any, NamedTuple

import numpy as np
import torch

from engine.sampling import noise
from engine.sampling.gumbel import scale

MAX_CANDIDATES = 32  # per-row buffer of tokens within the margin of the best (more: the row falls back)


class ArgmaxDetail(NamedTuple):
    """:func:`gumbel_argmax_detail`'s result: the tokens and what the pruning did, per row."""

    tokens: torch.Tensor  # (R,) int64 sampled ids
    evaluated: torch.Tensor  # (R,) int64 tokens whose two float64 logs were computed (-1: reference row)
    fallback: torch.Tensor  # (R,) bool rows drawn by the torch reference


@functools.lru_cache(maxsize=1)
def numba_available() -> bool:
    """True when numba imports (and the kernels can be built); False makes callers use the reference."""
    try:
        import numba  # noqa: F401
    except Exception:  # ImportError, or a broken llvmlite: fall back, never crash
        return False
    _shield_llvmlite()
    return True


def _shield_llvmlite() -> None:
    """Let vLLM build an engine in a process that has imported numba.

    vLLM 0.32's worker start (``register_triton_kernel_overrides``) scans every loaded module's
    globals and reads ``vars(value).get("kernel")`` of each value that has a ``__dict__``. llvmlite's
    ``ffi.lib`` answers any attribute name with a wrapped ctypes symbol, ``__dict__`` included, so
    ``vars(ffi.lib)`` is a function wrapper, ``.get`` raises AttributeError and the engine fails to
    start: any vLLM engine built after a CPU draw imported numba (a second model in the same
    process). An empty mapping under ``__dict__`` in its symbol table makes ``vars(ffi.lib)`` ``{}``
    (tests/test_cpu_argmax.py runs the same scan)."""
    try:
        from llvmlite.binding import ffi

        ffi.lib._fntab.setdefault("__dict__", {})
    except Exception:  # another llvmlite layout: nothing to shield
        pass


@functools.lru_cache(maxsize=1)
def _kernels() -> Any:
    """The kernels module (compiled on first call, or loaded from numba's cache).

    ``cache=True`` raises at import when numba finds no writable cache folder (package, $NUMBA_CACHE_DIR
    and the per-user folder all read-only): then a fresh temporary folder is used."""
    try:
        from engine.sampling import _cpu_argmax_kernels
    except RuntimeError as exc:
        if "cannot cache" not in str(exc):
            raise
        import numba

        numba.config.CACHE_DIR = tempfile.mkdtemp(prefix="coupled_eval_numba_")
        from engine.sampling import _cpu_argmax_kernels
    return _cpu_argmax_kernels


def _flat_rows(x: torch.Tensor) -> tuple[np.ndarray, int]:
    """x (R, V) float32 with unit column stride as a flat numpy view and its row stride (no copy)."""
    R, V = x.shape
    n = (R - 1) * x.stride(0) + V
    return torch.as_strided(x, (n,), (1,), x.storage_offset()).numpy(), x.stride(0)


def _choose(
    x: torch.Tensor,
    temperature: float,
    cand: torch.Tensor,
    n: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
) -> torch.Tensor:
    """The reference's winner among each row's candidates (ids ascending, padded): (R,) int64.

    The float32 noise at the candidates comes from noise.gumbel_at (the reference's own torch ops), so
    the float32 sums are the ones torch.argmax sees; the first maximum is the lowest id.
    """
    k = max(1, int(n.max()) if n.numel() else 1)
    cand = cand[:, :k]  # (R, k)
    g = noise.gumbel_at(seeds, units, steps, token_keys[cand])  # (R, k) float32
    s = scale(x.gather(1, cand), temperature) + g  # (R, k) the reference's float32 scores
    s = s.masked_fill(torch.arange(k)[None, :] >= n[:, None], float("-inf"))
    return cand.gather(1, torch.argmax(s, dim=1, keepdim=True)).squeeze(1)  # (R,)


def _check(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
) -> None:
    """ValueError naming the bad argument (shapes, dtypes, device, T)."""
    if logits.dim() != 2 or not logits.is_floating_point() or logits.device.type != "cpu":
        raise ValueError(
            f"logits must be a 2-d float CPU tensor, got {tuple(logits.shape)} {logits.dtype} "
            f"on {logits.device}"
        )
    R, V = logits.shape
    if V == 0:
        raise ValueError("logits has no columns (V = 0): nothing to sample")
    for name, t, shape in (
        ("seeds", seeds, (R,)),
        ("units", units, (R,)),
        ("steps", steps, (R,)),
        ("token_keys", token_keys, (V,)),
    ):
        if tuple(t.shape) != shape or t.dtype != torch.int64 or t.device.type != "cpu":
            raise ValueError(
                f"{name} must be an int64 CPU tensor of shape {shape}, got {tuple(t.shape)} "
                f"{t.dtype} on {t.device}"
            )
    if not (isinstance(temperature, (int, float)) and 0 < temperature < float("inf")):
        raise ValueError(
            f"temperature must be a finite number > 0 for a Gumbel draw, got {temperature!r}"
        )


def _scan(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
    with_lse: bool,
) -> tuple[ArgmaxDetail, torch.Tensor | None]:
    """The draw (and, with ``with_lse``, logsumexp(z) per row, float64): see the public functions."""
    _check(logits, seeds, units, steps, token_keys, temperature)
    R, V = logits.shape
    logits = logits.detach()
    x = (
        logits
        if logits.dtype == torch.float32 and logits.stride(-1) == 1
        else logits.float().contiguous()
    )
    if R == 0:
        empty = torch.zeros(0, dtype=torch.int64)
        lse0 = torch.zeros(0, dtype=torch.float64) if with_lse else None
        return ArgmaxDetail(empty, empty.clone(), torch.zeros(0, dtype=torch.bool)), lse0
    t = np.float32(temperature)  # torch divides a float32 tensor by the scalar cast to float32
    u64 = np.uint64
    kern = _kernels()
    tok = kern.token_mix(token_keys.contiguous().numpy().view(u64))  # (V,) uint64
    rows = kern.row_hashes(
        seeds.contiguous().numpy().view(u64),
        units.contiguous().numpy().view(u64),
        steps.contiguous().numpy().view(u64),
    )  # (R,) uint64
    cand = np.zeros((R, MAX_CANDIDATES), np.int64)  # (R, K)
    n = np.zeros(R, np.int64)
    evaluated = np.zeros(R, np.int64)
    zmax = np.empty(R, np.float32)  # (R,) each row's largest z (NaN if it holds one)
    sums = np.empty(R if with_lse else 0, np.float64)  # (R,) sum of e^(z - zmax), or nothing
    xf, rs = _flat_rows(x)
    kern.scan_rows(xf, rs, V, t, rows, tok, cand, n, evaluated, zmax, sums)
    cand_t, n_t, ev_t = torch.from_numpy(cand), torch.from_numpy(n), torch.from_numpy(evaluated)
    fallback = n_t <= 0  # overflowing rows (-1) and rows without a finite maximum (0)
    tokens = torch.zeros(R, dtype=torch.int64)
    good = ~fallback
    if bool(good.all()):
        tokens = _choose(x, temperature, cand_t, n_t, seeds, units, steps, token_keys)
    elif bool(good.any()):
        i = good.nonzero().squeeze(1)
        tokens[i] = _choose(
            x[i], temperature, cand_t[i], n_t[i], seeds[i], units[i], steps[i], token_keys
        )
    lse = None
    if with_lse:
        lse = (
            torch.from_numpy(zmax).double() + torch.from_numpy(sums).log()
        )  # (R,) float64; nan: no finite max
    if bool(fallback.any()):
        i = fallback.nonzero().squeeze(1)
        z = scale(x[i], temperature)  # (f, V)
        g = noise.gumbel(seeds[i], units[i], steps[i], token_keys)  # (f, V) the reference, on few rows
        tokens[i] = torch.argmax(z + g, dim=1)
        ev_t[i] = -1
        if lse is not None:
            lse[i] = torch.logsumexp(z, dim=1).double()  # torch's own value where the row is not finite
    return ArgmaxDetail(tokens, ev_t, fallback), lse


def gumbel_argmax_detail(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
) -> ArgmaxDetail:
    """:func:`gumbel_argmax_cpu` with the per-row pruning counts (for tests and the bench)."""
    return _scan(logits, seeds, units, steps, token_keys, temperature, with_lse=False)[0]


def gumbel_argmax_lse(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gumbel_argmax_cpu`'s tokens and the normaliser of D, without an (R, V) tensor.

        lse[r] = zmax[r] + log sum_v exp(z[r, v] - zmax[r]),   z = float32(logits) / T

    summed in float64 over float32 exponentials (relative error < 1e-7 each) in one more pass of the
    kernel over the logits, so it is torch.logsumexp(z) to float32 rounding (another summation order:
    not its bits); rows without a finite maximum get torch.logsumexp's own value. The sampler's
    probability of the token is then exp(z[token] - lse).

    Returns:
        (tokens (R,) int64, lse (R,) float64).
    """
    d, lse = _scan(logits, seeds, units, steps, token_keys, temperature, with_lse=True)
    assert lse is not None  # asked for
    return d.tokens, lse


def gumbel_argmax_cpu(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    units: torch.Tensor,
    steps: torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Keyed Gumbel-max tokens on CPU: exactly ``torch.argmax(z + noise.gumbel(seeds, units, steps,
    token_keys), dim=-1)`` with z = float32(logits) / T, without the (R, V) noise.

    Args:
        logits: (R, V) CPU float tensor, any float dtype; rows may be strided (a row view of a wider
            buffer); cast to float32 (and divided by T unless T == 1) exactly as the reference.
        seeds, units, steps: (R,) int64 (seed bits as noise.seed_tensor, unit keys, step indices).
        token_keys: (V,) int64 token keys.
        temperature: T > 0.

    Returns:
        (R,) int64 token ids. Needs numba (:func:`numba_available`).
    """
    return gumbel_argmax_detail(logits, seeds, units, steps, token_keys, temperature).tokens


__all__ = [
    "MAX_CANDIDATES",
    "ArgmaxDetail",
    "gumbel_argmax_cpu",
    "gumbel_argmax_detail",
    "gumbel_argmax_lse",
    "numba_available",
]
