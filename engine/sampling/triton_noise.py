"""Fused keyed Gumbel noise (and Gumbel-max) in Triton; the torch reference is
engine.sampling.noise.gumbel.

One kernel pass writes g[b, v] = G(seed[b], unit[b], step[b], token_key[v]) (docs/METHODS.md 1.3):

    row = mix(mix(mix(seed) + unit) + step)                     per program (one row): 3 scalar mixes
    h   = mix(row + mix(token_key + SALT))                      per element: 2 mixes, uint64
    u   = max((h >>> 11) * 2^-53, tiny)                         float64, exact
    g   = float32( -log(-log(u)) )                              float64 logs, one rounding at the end

The reference (:func:`engine.sampling.noise.gumbel`) runs ~20 elementwise torch passes over (B, V) int64
and float64 temporaries: on a GPU at batch 256 and a 128k vocabulary each pass streams ~0.26 GB, so the
noise alone would cost more than a decode step of a 1B model. Here the integer hash and the logs stay in
registers and the only (B, V) traffic is the float32 output (or nothing at all:
:func:`gumbel_argmax_fused` reduces to the sampled token inside the kernel).

The single-read kernel (:func:`gumbel_argmax_logits`) goes one step further: it reads the
raw logits (float32 / bf16 / fp16, any strides, or a selection of rows), divides by T with IEEE
rounding (``tl.math.div_rn``: Triton's ``/`` on fp32 is an approximate division on CUDA; torch's CUDA
``x / number`` is ``x * (1 / number)``, so engine.sampling.gumbel.scale divides by a tensor), keeps the
running argmax of z + g and an online logsumexp of z, and writes the token and its probability: one
read of the logits, two values written per row, no (B, V) temporary. argmax(z + g) is the product's
sampling formula (engine.sampling.gumbel), so its tokens are the torch reference's.

Bit-identity with the reference: the integer part is exact by construction (Triton has uint64, whose
``>>`` is logical, and ``+``/``*`` wrap like torch's int64); the clamp to ``1 - 2^-53`` of the
reference is a no-op on the 53-bit grid (its largest value is ``1 - 2^-53``), and the clamp to
``tiny`` only ever maps ``u = 0`` (written as a ``where``: a Python float literal would be fp32 in a
Triton kernel and ``tiny`` is not representable in fp32). The float64 ``log`` is the platform's:
on CUDA, libdevice ``__nv_log`` (what torch's CUDA ``log`` of a double is built from, the CUDA
math library); under the CPU interpreter, numpy's ``log``. Either may differ from torch CPU's
float64 ``log`` in the last bit, which changes the float32 result only when the float64 value lies
within that bit of a float32 rounding boundary (measured on CPU: numpy and torch float64 logs differ
on ~0.3% of values, the float32 results on 0 of 51,302,400; tests/test_noise_kernel.py).

Dispatch: :func:`gumbel_fused` runs the kernel on CUDA tensors when Triton imports, and the torch
reference everywhere else (CPU, no Triton, ``backend="torch"``). CPU tensors passed to
:func:`gumbel_triton` (or ``backend="triton"``) run the same kernel source in Triton's interpreter
(numpy; what ``TRITON_INTERPRET=1`` selects): that is how CI tests it without a GPU. CUDA tensors
always run compiled. :func:`gumbel_argmax_fused` and :func:`gumbel_argmax_logits` on CPU tensors need
``TRITON_INTERPRET=1`` set before triton is first imported (Triton decorates its own reductions,
tl.max / tl.argmax, at import); the noise kernel has no reductions and interprets either way.
"""

from __future__ import annotations

import functools
import struct
from typing import Literal

import torch

from engine.sampling import noise

Backend = Literal["auto", "triton", "torch"]
BACKENDS = ("auto", "triton", "torch")


def _use_triton(backend: str, device: torch.device) -> bool:
    """Whether the Triton kernel runs: ``backend="triton"``, or ``"auto"`` on a CUDA device where Triton
    imports. ValueError naming an unknown backend."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown noise backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    return backend == "triton" or (backend == "auto" and device.type == "cuda" and triton_importable())


@functools.lru_cache(maxsize=1)
def triton_importable() -> bool:
    """True when ``import triton`` works (the kernel needs it; the torch reference does not)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # ImportError, or a broken install (missing libs): fall back, never crash
        return False
    return True


# ----------------------------------------------------------------------------- kernels
# Module level because triton.jit resolves the helpers (_mix, ...) through the module's globals.
# triton.jit decides compiled vs interpreted when it decorates (TRITON_INTERPRET at that moment), so
# :func:`_kernels` loads a second copy of this file for the other mode (CUDA and CPU in one process).
if triton_importable():
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def _mix(x):
        # splitmix64 finaliser on uint64: + and * wrap mod 2^64, >> is logical on unsigned ints. The
        # constants are literals (a kernel reads no Python globals): noise._mix_int's, and the token
        # salt below is noise._TOKEN_SALT's bits (tests/test_noise_kernel.py checks the bits agree)
        x = x + 0x9E3779B97F4A7C15
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB
        return x ^ (x >> 31)

    @triton.jit
    def _row_hash(seed_ptr, unit_ptr, step_ptr, b):
        # (seed, unit, step) of row b -> its 64-bit row hash (3 scalar mixes: free next to the V loop)
        s = tl.load(seed_ptr + b).to(tl.uint64, bitcast=True)
        u = tl.load(unit_ptr + b).to(tl.uint64, bitcast=True)
        t = tl.load(step_ptr + b).to(tl.uint64, bitcast=True)
        return _mix(_mix(_mix(s) + u) + t)

    @triton.jit
    def _gumbel_block(row, keys_ptr, offs, m, LIBDEVICE: tl.constexpr):
        # (BLOCK,) float32 Gumbels of one row's token block; float64 until the last line
        k = tl.load(keys_ptr + offs, mask=m, other=0).to(tl.uint64, bitcast=True)
        h = _mix(row + _mix(k + 0xD6E8FEB86659FD93))
        q = h >> 11  # 53 random bits, < 2^53: exact in float64
        u = q.to(tl.float64) * 1.1102230246251565e-16  # 2^-53, a power of two: exact in any float
        # u = 0 -> tiny, as the reference's clamp; from bits because a float literal would be fp32
        tiny = tl.full(q.shape, 0x0010000000000000, tl.uint64).to(tl.float64, bitcast=True)
        u = tl.where(q == 0, tiny, u)
        if LIBDEVICE:  # CUDA: libdevice's float64 log (__nv_log), the CUDA math library torch's log uses
            g = -libdevice.log(-libdevice.log(u))
        else:  # the interpreter (numpy's log)
            g = -tl.log(-tl.log(u))
        return g.to(
            tl.float32
        )  # round to nearest even, once, as the reference's float64 -> float32 copy

    @triton.jit
    def _gumbel_kernel(
        out_ptr, seed_ptr, unit_ptr, step_ptr, keys_ptr, V, BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr
    ):
        # grid (B, cdiv(V, BLOCK)): program (b, j) writes out[b, j*BLOCK : (j+1)*BLOCK]
        b = tl.program_id(0).to(tl.int64)
        offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = offs < V
        row = _row_hash(seed_ptr, unit_ptr, step_ptr, b)
        g = _gumbel_block(row, keys_ptr, offs, m, LIBDEVICE)
        tl.store(out_ptr + b * V + offs, g, mask=m)

    @triton.jit
    def _nan_first(sc, offs, V):
        """(the block's first NaN id, or V when none; the scores with NaN as -inf). torch.argmax takes
        NaN for the maximum, the first one; Triton's max / argmax treat it differently compiled (fmax
        ignores it) and interpreted (numpy propagates it), so the kernels handle it themselves."""
        isn = sc != sc
        nan_at = tl.min(tl.where(isn, offs, V), axis=0)
        return nan_at, tl.where(isn, float("-inf"), sc)

    @triton.jit
    def _gumbel_argmax_kernel(
        tok_ptr,
        gval_ptr,
        logp_ptr,
        seed_ptr,
        unit_ptr,
        step_ptr,
        keys_ptr,
        V,
        stride,
        BLOCK: tl.constexpr,
        LIBDEVICE: tl.constexpr,
    ):
        # grid (B,): program b scans row b's vocabulary in blocks, keeping the running argmax of
        # logp + g; ties -> the lowest id (torch.argmax's rule): first in a block, strict > across
        b = tl.program_id(0).to(tl.int64)
        row = _row_hash(seed_ptr, unit_ptr, step_ptr, b)
        best = tl.full((), float("-inf"), tl.float32)
        best_i = tl.full((), 0, tl.int64)
        best_g = tl.full((), 0.0, tl.float32)
        found = tl.full(
            (), 0, tl.int32
        )  # 1 once a NaN score was seen: the first NaN is torch.argmax's pick
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            m = offs < V
            g = _gumbel_block(row, keys_ptr, offs, m, LIBDEVICE)  # (BLOCK,)
            lp = tl.load(logp_ptr + b * stride + offs, mask=m, other=float("-inf"))  # (BLOCK,)
            z = tl.where(m, lp + g, float("-inf"))  # the float32 sum the reference's argmax sees
            nan_at, z = _nan_first(
                z, offs, V
            )  # NaN scores out of the max / argmax (their lowerings differ)
            zmax = tl.max(z, axis=0)
            zi = tl.argmax(z, axis=0, tie_break_left=True)
            take_nan = (nan_at < V) & (found == 0)
            # the first block always sets the running best (a row of -inf -> id 0, as torch.argmax)
            better = ((zmax > best) | (start == 0)) & (found == 0)
            best_i = tl.where(
                take_nan, nan_at.to(tl.int64), tl.where(better, (start + zi).to(tl.int64), best_i)
            )
            best_g = tl.where(
                take_nan | better, tl.sum(tl.where(offs == best_i, g, 0.0), axis=0), best_g
            )
            best = tl.where(better, zmax, best)
            found = tl.where(take_nan, 1, found)
        tl.store(tok_ptr + b, best_i)
        tl.store(gval_ptr + b, best_g)

    @triton.jit
    def _gumbel_argmax_lse_kernel(
        tok_ptr,
        prob_ptr,
        x_ptr,
        rows_ptr,
        seed_ptr,
        unit_ptr,
        step_ptr,
        keys_ptr,
        V,
        stride_r,
        stride_v,
        temperature,
        BLOCK: tl.constexpr,
        LIBDEVICE: tl.constexpr,
        SCALE: tl.constexpr,
        HAS_ROWS: tl.constexpr,
    ):
        # grid (B,): program b reads its logits row ONCE, in blocks, in their own dtype, keeping
        # (1) the running argmax of z + g, z = float32(x) / T (IEEE division), ties -> lowest id as
        # _gumbel_argmax_kernel, and (2) an online logsumexp of z (running max mx, sum s of exp(z - mx)).
        # Writes token b and exp(z[token] - logsumexp(z)): O(1) per row.
        b = tl.program_id(0).to(tl.int64)
        if HAS_ROWS:  # a gathered selection: row b of the draw is row rows[b] of x (no copy)
            r = tl.load(rows_ptr + b).to(tl.int64)
        else:
            r = b
        row = _row_hash(seed_ptr, unit_ptr, step_ptr, b)
        best = tl.full((), float("-inf"), tl.float32)
        best_i = tl.full((), 0, tl.int64)
        best_z = tl.full((), float("-inf"), tl.float32)
        mx = tl.full((), float("-inf"), tl.float32)
        s = tl.full((), 0.0, tl.float32)
        found = tl.full((), 0, tl.int32)  # 1 once a NaN z was seen: the first NaN is torch.argmax's pick
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            m = offs < V
            x = tl.load(x_ptr + r * stride_r + offs.to(tl.int64) * stride_v, mask=m, other=float("-inf"))
            z = x.to(tl.float32)  # (BLOCK,) exact from bf16 / fp16
            if SCALE:  # div_rn: IEEE round-to-nearest (Triton's "/" is an approximate division on CUDA)
                z = tl.math.div_rn(z, temperature)
            z = tl.where(m, z, float("-inf"))
            nan_at, z = _nan_first(
                z, offs, V
            )  # NaN out of the max / argmax / sums (the row's result is NaN)
            g = _gumbel_block(row, keys_ptr, offs, m, LIBDEVICE)  # (BLOCK,)
            sc = tl.where(m, z + g, float("-inf"))  # the float32 sum the reference's argmax sees
            smax = tl.max(sc, axis=0)
            si = tl.argmax(sc, axis=0, tie_break_left=True)
            zi = tl.max(
                tl.where(offs == start + si, z, float("-inf")), axis=0
            )  # z at the block's winner
            take_nan = (nan_at < V) & (found == 0)
            better = ((smax > best) | (start == 0)) & (
                found == 0
            )  # the first block sets it (all -inf -> id 0)
            best_i = tl.where(
                take_nan, nan_at.to(tl.int64), tl.where(better, (start + si).to(tl.int64), best_i)
            )
            best_z = tl.where(better, zi, best_z)
            best = tl.where(better, smax, best)
            found = tl.where(take_nan, 1, found)
            bmax = tl.max(z, axis=0)
            new = tl.maximum(mx, bmax)
            base = tl.where(
                (new == float("-inf")) | (new == float("inf")), 0.0, new
            )  # no inf - inf here
            s = s * tl.exp(mx - base) + tl.sum(tl.exp(z - base), axis=0)
            mx = new
        tl.store(tok_ptr + b, best_i)
        # log D[token] = (z - max) - log(sum), the order torch's log_softmax computes it in; NaN (as
        # torch's) when z holds a NaN or a +inf (inf - inf)
        bad = (found == 1) | (mx == float("inf"))
        tl.store(prob_ptr + b, tl.where(bad, float("nan"), tl.exp((best_z - mx) - tl.log(s))))


def _this_mode() -> bool:
    """Whether this module's kernels were decorated as interpreted."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_gumbel_kernel, InterpretedFunction)


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool):
    """(gumbel kernel, gumbel-argmax kernel, single-read logits kernel), compiled (CUDA) or interpreted
    (numpy on CPU tensors)."""
    if _this_mode() == interpret:
        return _gumbel_kernel, _gumbel_argmax_kernel, _gumbel_argmax_lse_kernel
    import importlib.util
    import os
    import sys

    # a second copy of this file decorated in the other mode (its own globals, so its own helpers)
    name = f"{__name__}_{'interpreted' if interpret else 'compiled'}"
    spec = importlib.util.spec_from_file_location(name, __file__)
    assert spec is not None and spec.loader is not None  # this very file
    mod = importlib.util.module_from_spec(spec)
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        sys.modules[name] = mod  # triton resolves a kernel's globals through its module
        spec.loader.exec_module(mod)
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old
    return mod._gumbel_kernel, mod._gumbel_argmax_kernel, mod._gumbel_argmax_lse_kernel


def _row_inputs(
    seed, unit_keys: torch.Tensor, step, device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(seed bits, unit keys, steps), each int64 (B,) contiguous on ``device``."""
    unit = unit_keys.to(device=device, dtype=torch.int64).contiguous()  # (B,)
    if isinstance(seed, torch.Tensor):
        s = seed.to(device=device, dtype=torch.int64).expand(unit.shape[0]).contiguous()  # (B,)
    else:
        s = (
            noise.seed_tensor([seed], device=device).expand(unit.shape[0]).contiguous()
        )  # (B,) same bits, seed checked
    if isinstance(step, torch.Tensor):
        t = step.to(device=device, dtype=torch.int64).expand(unit.shape[0]).contiguous()  # (B,)
    else:
        t = torch.full_like(unit, int(step))  # (B,)
    return s, unit, t


def _interpreting(device: torch.device) -> bool:
    """CPU tensors run in Triton's interpreter; CUDA tensors run compiled (whatever TRITON_INTERPRET
    says: a test module that sets it for its CPU cases must not send the CUDA case to numpy)."""
    return device.type != "cuda"


def _argmax_launch(
    seed, unit_keys: torch.Tensor, step, token_keys: torch.Tensor, dev: torch.device, B: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """What both argmax kernels are launched with: (token keys (V,), seeds, units, steps (B,) int64,
    the token output (B,) int64, the per-row float32 output (B,), interpreted?), all on ``dev``."""
    keys = token_keys.to(device=dev, dtype=torch.int64).contiguous()  # (V,)
    s, unit, t = _row_inputs(seed, unit_keys, step, dev)
    tok = torch.empty(B, dtype=torch.int64, device=dev)
    val = torch.empty(B, dtype=torch.float32, device=dev)
    return keys, s, unit, t, tok, val, _interpreting(dev)


def gumbel_triton(
    seed: int | torch.Tensor,
    unit_keys: torch.Tensor,
    step: int | torch.Tensor,
    token_keys: torch.Tensor,
    out: torch.Tensor | None = None,
    block: int | None = None,
) -> torch.Tensor:
    """The Triton kernel: same contract and bits as :func:`engine.sampling.noise.gumbel`.

    Runs compiled on CUDA tensors, and in Triton's numpy interpreter on CPU tensors (slow: tests).

    Args:
        seed: int in [0, 2^64) or LongTensor (B,) of per-row seed bits.
        unit_keys: LongTensor (B,) from :func:`engine.noise.unit_key`.
        step: int or LongTensor (B,) generated-token index.
        token_keys: LongTensor (V,) token keys.
        out: optional float32 (B, V) contiguous buffer to write into (e.g. reused across steps).
        block: tokens per program (default 1024 compiled, 16384 interpreted).

    Returns:
        float32 (B, V) on ``token_keys.device``.
    """
    dev = token_keys.device
    keys = token_keys.to(torch.int64).contiguous()  # (V,)
    s, unit, t = _row_inputs(seed, unit_keys, step, dev)
    B, V = unit.shape[0], keys.shape[0]
    if out is None:
        out = torch.empty(B, V, dtype=torch.float32, device=dev)  # (B, V)
    elif (
        out.shape != (B, V) or out.dtype != torch.float32 or not out.is_contiguous() or out.device != dev
    ):
        raise ValueError(
            f"out must be a contiguous float32 ({B}, {V}) tensor on {dev}, got "
            f"{out.dtype} {tuple(out.shape)} on {out.device}"
        )
    if B == 0 or V == 0:
        return out
    interp = _interpreting(dev)
    block = block or (16384 if interp else 1024)
    kernel = _kernels(interp)[0]
    kernel[(B, -(-V // block))](out, s, unit, t, keys, V, BLOCK=block, LIBDEVICE=not interp)
    return out


def gumbel_fused(
    seed: int | torch.Tensor,
    unit_keys: torch.Tensor,
    step: int | torch.Tensor,
    token_keys: torch.Tensor,
    backend: Backend = "auto",
) -> torch.Tensor:
    """Keyed Gumbel noise (B, V) float32: the Triton kernel on CUDA, else the torch reference.

    Args:
        seed, unit_keys, step, token_keys: as :func:`engine.sampling.noise.gumbel`.
        backend: ``"auto"`` (Triton on CUDA when importable, torch otherwise), ``"triton"`` (the
            kernel; on CPU tensors the interpreter), ``"torch"`` (the reference).

    Returns:
        float32 (B, V) on ``token_keys.device``, the reference's bits (see the module docstring
        for the float64 ``log`` caveat across libraries).
    """
    if _use_triton(backend, token_keys.device):
        return gumbel_triton(seed, unit_keys, step, token_keys)
    return noise.gumbel(seed, unit_keys, step, token_keys)


def gumbel_argmax_fused(
    logp: torch.Tensor,
    seed: int | torch.Tensor,
    unit_keys: torch.Tensor,
    step: int | torch.Tensor,
    token_keys: torch.Tensor,
    backend: Backend = "auto",
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gumbel-max without materialising the noise: T_b = argmax_v (z[b, v] + g[b, v]).

    Same tokens as ``torch.argmax(z + noise.gumbel(...), -1)`` (engine.sampling.sample): the
    noise is the reference's, the float32 sum is the same rounding, ties go to the lowest id (NaN
    and +inf as torch.argmax: the first NaN, else the first +inf). The (B, V) noise is never
    written: the kernel reads z once and writes B tokens.

    Args:
        logp: float32 (B, V) scores z, the sampler's masked scaled logits float32(logits) / T
            (engine.sampling.gumbel.masked_logits; -inf = masked), as keyed.draw passes them. Any
            per-row shift of z (log-probabilities, z - logsumexp z) samples the same distribution
            but is another float formula: the tokens are then those of that formula.
        seed, unit_keys, step, token_keys: as :func:`engine.sampling.noise.gumbel`.
        backend: as :func:`gumbel_fused`.

    Returns:
        (tokens LongTensor (B,), the chosen tokens' Gumbel values float32 (B,)).
    """
    use_triton = _use_triton(backend, logp.device)
    if logp.dtype != torch.float32 or logp.dim() != 2 or logp.shape[1] != token_keys.shape[0]:
        raise ValueError(
            f"logp must be float32 (B, {token_keys.shape[0]}), got {logp.dtype} {tuple(logp.shape)}"
        )
    if not use_triton:
        g = noise.gumbel(seed, unit_keys, step, token_keys)  # (B, V)
        tok = torch.argmax(logp + g, dim=-1)  # (B,)
        return tok, g.gather(1, tok[:, None]).squeeze(1)
    B, V = logp.shape
    if logp.stride(1) != 1:
        logp = logp.contiguous()
    keys, s, unit, t, tok, gval, interp = _argmax_launch(
        seed, unit_keys, step, token_keys, logp.device, B
    )
    if B == 0:
        return tok, gval
    block = block or (16384 if interp else 2048)
    kernel = _kernels(interp)[1]
    kernel[(B,)](tok, gval, logp, s, unit, t, keys, V, logp.stride(0), BLOCK=block, LIBDEVICE=not interp)
    return tok, gval


def _check_logits(logits: torch.Tensor, rows: torch.Tensor | None, temperature: float, V: int) -> None:
    """ValueError naming the bad argument of :func:`gumbel_argmax_logits`."""
    if (
        logits.dim() != 2
        or logits.shape[1] != V
        or logits.dtype not in (torch.float32, torch.bfloat16, torch.float16)
    ):
        raise ValueError(
            f"logits must be (N, {V}) float32, bfloat16 or float16, got {logits.dtype} "
            f"{tuple(logits.shape)}"
        )
    if not temperature > 0:
        raise ValueError(
            f"temperature must be > 0 here (greedy T = 0 takes no noise), got {temperature!r}"
        )
    if rows is not None and (rows.dim() != 1 or rows.dtype != torch.int64):
        raise ValueError(f"rows must be a 1-D int64 tensor, got {rows.dtype} {tuple(rows.shape)}")


def gumbel_argmax_logits(
    logits: torch.Tensor,
    seed: int | torch.Tensor,
    unit_keys: torch.Tensor,
    step: int | torch.Tensor,
    token_keys: torch.Tensor,
    temperature: float,
    rows: torch.Tensor | None = None,
    backend: Backend = "auto",
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The keyed Gumbel-max sample straight from the logits, reading them once (no top-k / top-p).

    T_b = argmax_v (z[b, v] + g[b, v]) with z = float32(logits) / T (engine.sampling.gumbel.scale:
    IEEE division, none at T = 1), ties to the lowest id, and D[T_b] = exp(z[T_b] - logsumexp(z[b])).
    The Triton kernel streams each row once in the logits' own dtype (strided rows, or the rows
    ``rows`` selects, without a copy), keeps the running argmax and an online logsumexp in
    registers, and writes two values per row: no (B, V) temporary at all. The torch path (CPU, or
    ``backend="torch"``) computes the same formula with (B, V) tensors.

    Args:
        logits: (N, V) float32, bfloat16 or float16 logits, any strides.
        seed, unit_keys, step, token_keys: as :func:`engine.sampling.noise.gumbel`, one row each per
            drawn row (B = N, or B = len(rows)).
        temperature: T > 0.
        rows: optional (B,) int64 rows of ``logits`` to draw, on its device.
        backend: as :func:`gumbel_fused`.

    Returns:
        (tokens int64 (B,), probabilities float32 (B,)); tokens equal the torch formula's (same noise
        bits, same float32 rounding), probabilities agree to float32 rounding (a different
        summation order).
    """
    use_triton = _use_triton(backend, logits.device)
    V = token_keys.shape[0]
    _check_logits(logits, rows, temperature, V)
    if not use_triton:
        from engine.sampling.gumbel import scale

        z = scale(logits if rows is None else logits[rows], temperature)  # (B, V)
        tok = torch.argmax(z + noise.gumbel(seed, unit_keys, step, token_keys), dim=-1)  # (B,)
        return tok, (z.gather(1, tok[:, None]).squeeze(1) - torch.logsumexp(z, dim=-1)).exp()
    B = logits.shape[0] if rows is None else rows.shape[0]
    keys, s, unit, t, tok, prob, interp = _argmax_launch(
        seed, unit_keys, step, token_keys, logits.device, B
    )
    if B == 0:
        return tok, prob
    block = block or (16384 if interp else 2048)
    t32 = struct.unpack("f", struct.pack("f", temperature))[
        0
    ]  # float32(T): exact as the kernel's fp32 argument
    kernel = _kernels(interp)[2]
    kernel[(B,)](
        tok,
        prob,
        logits,
        tok if rows is None else rows,
        s,
        unit,
        t,
        keys,
        V,
        logits.stride(0),
        logits.stride(1),
        t32,
        BLOCK=block,
        LIBDEVICE=not interp,
        SCALE=temperature != 1.0,
        HAS_ROWS=rows is not None,
    )
    return tok, prob


__all__ = [
    "BACKENDS",
    "gumbel_argmax_fused",
    "gumbel_argmax_logits",
    "gumbel_fused",
    "gumbel_triton",
    "triton_importable",
]
