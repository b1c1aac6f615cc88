"""Weight-only quantization of the default family's variants: int8 per channel, int4 grouped and
GGUF Q8_0 / Q4_0, each simulated as quantize -> dequantize (float32 weights with the rounded values).
Pure tensor functions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from engine.errors import UserError
from engine.models.registry import INT4_GROUP  # noqa: F401  (re-exported: the int4 group size)

# ---------------------------------------------------------------------------------------------
# Weight-only quantization (simulated: quantize -> dequantize, float32 result)


def quantize_int8_per_channel(w: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 per output channel: q = round(w / s), s = max|w_row| / 127; returns q * s.

    Args: w: (out, in) float weight. Returns: (out, in) float32 with at most 255 distinct values per row.
    """
    w = w.float()
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0  # (out, 1)
    q = torch.clamp(torch.round(w / scale), -127, 127)  # (out, in) integers
    return q * scale


def quantize_int4_grouped(w: torch.Tensor, group: int = INT4_GROUP) -> torch.Tensor:
    """Symmetric 4-bit per group of ``group`` inputs: q = round(w / s) in [-8, 7], s = max|w_g| / 7.

    Args: w: (out, in) with in % group == 0. Returns: (out, in) float32 (<= 16 values per group).
    """
    out, inp = w.shape
    if inp % group:
        raise UserError(f"int4 group size {group} does not divide the input width {inp}")
    g = w.float().reshape(out, inp // group, group)  # (out, G, group)
    scale = g.abs().amax(dim=2, keepdim=True).clamp_min(1e-12) / 7.0  # (out, G, 1)
    q = torch.clamp(torch.round(g / scale), -8, 7)
    return (q * scale).reshape(out, inp)


def quantize_gguf(w: torch.Tensor, qtype: str) -> torch.Tensor:
    """GGUF block quantization (``Q8_0``, ``Q4_0``, ...) via ``gguf.quants``, dequantized back.

    Args: w: (out, in) with in a multiple of the block size (32). Returns: (out, in) float32.
    """
    import gguf
    from gguf import quants

    try:
        t = gguf.GGMLQuantizationType[qtype]
    except KeyError as exc:
        raise UserError(f"unknown GGUF quantization {qtype!r}; try Q8_0, Q5_0, Q4_0") from exc
    arr = w.detach().float().cpu().numpy()
    deq = quants.dequantize(quants.quantize(arr, t), t)
    return torch.from_numpy(np.ascontiguousarray(deq, dtype=np.float32)).reshape(w.shape)


_QUANTIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "int8": quantize_int8_per_channel,
    "int4": quantize_int4_grouped,
    "gguf-q8_0": lambda w: quantize_gguf(w, "Q8_0"),
    "gguf-q4_0": lambda w: quantize_gguf(w, "Q4_0"),
}


def quantize_linear_weights(model: torch.nn.Module, variant: str) -> int:
    """Replace every decoder-layer ``nn.Linear`` weight by its quantize->dequantize image (in place).

    The LM head and the embedding (tied in SmolLM2) are left as they are. Returns the number of
    weight matrices changed.
    """
    fn = _QUANTIZERS[variant]
    layers = getattr(getattr(model, "model", model), "layers", None)
    modules = layers.modules() if layers is not None else model.modules()
    n = 0
    with torch.no_grad():
        for mod in modules:
            if isinstance(mod, torch.nn.Linear):
                mod.weight.copy_(fn(mod.weight.data).to(mod.weight.dtype))
                n += 1
    return n
