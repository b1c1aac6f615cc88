"""A first-use check of the compiled Triton kernels against the torch formula, per CUDA device.

Why: the kernels' tests run in Triton's interpreter on CPU in CI; compiled on a GPU they are tested
only where ``scripts/gpu_check.sh`` ran. A kernel that fails to compile, or compiles to different
tokens (a lowering of ``div_rn``, ``log`` or the online logsumexp that the interpreter does not
show), must never decide a coupled sample. So before :func:`engine.sampling.keyed.draw` first uses
them on a device, both kernels (``gumbel_argmax_fused`` over z, ``gumbel_argmax_logits`` over the
raw logits) sample a small seeded probe, and their tokens must equal the torch path's on the same
device; otherwise ``draw`` keeps the torch path on that device for the process and warns once,
naming the reason. The probe has rows with NaN, +inf and -inf entries and a row of -inf, whose
tokens the kernels must also agree on (torch.argmax: the first NaN, else the first +inf, else the
maximum; a row of -inf gives 0). Cost: a few kernel launches at 8 x 5,003, once per device and process.

Imports nothing outside engine.sampling.
"""

from __future__ import annotations

import functools
import warnings

import torch

from engine.sampling import noise
from engine.sampling.gumbel import scale

PROBE_ROWS, PROBE_VOCAB = 8, 5003  # V not a multiple of any block size


def _probe(device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Seeded logits (R, V) in ``dtype`` with a spread like an LM's, and per-row keys, on ``device``."""
    g = torch.Generator().manual_seed(20261125)
    logits = (torch.randn(PROBE_ROWS, PROBE_VOCAB, generator=g) * 3).to(dtype)  # (R, V)
    nan, inf = float("nan"), float("inf")
    logits[0, 17] = -inf  # a masked entry
    # non-finite logits, where a compiled max / argmax may treat NaN and inf unlike torch.argmax (NaN
    # is the maximum, the first one; then the first +inf; a row of -inf gives 0)
    logits[1, 4500] = nan  # a NaN in a late block
    logits[2, 30], logits[2, 4999] = inf, nan  # +inf first, a NaN later: the NaN
    logits[3, 2048], logits[3, 3000] = inf, inf  # two +inf: the first
    logits[4] = -inf  # all masked
    seeds = torch.randint(-(2**62), 2**62, (PROBE_ROWS,), generator=g, dtype=torch.int64)
    units = torch.randint(-(2**62), 2**62, (PROBE_ROWS,), generator=g, dtype=torch.int64)
    steps = torch.randint(0, 4096, (PROBE_ROWS,), generator=g, dtype=torch.int64)
    keys = torch.randperm(PROBE_VOCAB, generator=g).to(torch.int64)  # (V,)
    return tuple(t.to(device) for t in (logits, seeds, units, steps, keys))


def _disagreement(device: torch.device) -> str | None:
    """None when both kernels give the torch formula's tokens on the probe; else what went wrong."""
    from engine.sampling.triton_noise import gumbel_argmax_fused, gumbel_argmax_logits

    for dtype in (torch.float32, torch.bfloat16):
        logits, seeds, units, steps, keys = _probe(device, dtype)
        for t in (1.0, 0.7):
            z = scale(logits, t)  # (R, V) float32 z = x / T, as the torch path computes it
            want = torch.argmax(z + noise.gumbel(seeds, units, steps, keys), dim=-1)  # (R,)
            try:
                fused, _ = gumbel_argmax_fused(z, seeds, units, steps, keys, backend="triton")
                single, _ = gumbel_argmax_logits(logits, seeds, units, steps, keys, t, backend="triton")
            except Exception as exc:  # a compile or launch failure: any kind, Triton's own included
                return f"the kernels failed on {device} ({type(exc).__name__}: {exc})"
            for name, got in (("gumbel_argmax_fused", fused), ("gumbel_argmax_logits", single)):
                if not torch.equal(got, want):
                    bad = int((got != want).sum())
                    return (
                        f"{name} picked other tokens than the torch formula on {device} in {bad} of "
                        f"{PROBE_ROWS} probe rows ({dtype}, T = {t})"
                    )
    return None


@functools.cache
def kernels_agree(device: str) -> bool:
    """True when the compiled kernels agree with the torch formula on ``device`` (checked once per
    device and process); False, with one warning naming the reason, when they do not."""
    why = _disagreement(torch.device(device))
    if why is None:
        return True
    warnings.warn(
        f"coupled-eval: {why}; sampling on {device} uses the torch path instead (same tokens, "
        "more memory traffic). Please report it with `python -m pytest tests/test_noise_kernel.py`'s "
        "output on this GPU.",
        RuntimeWarning,
        stacklevel=2,
    )
    return False


__all__ = ["PROBE_ROWS", "PROBE_VOCAB", "kernels_agree"]
