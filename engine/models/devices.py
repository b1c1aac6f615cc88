"""Device and dtype of the transformers backend (the vLLM backend shares the dtype rule through
:meth:`engine.models.refs.ModelRef.default_dtype`)."""

from __future__ import annotations

import torch

from engine.errors import UserError


def default_device() -> torch.device:
    """CUDA if available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None``/"auto" -> :func:`default_device`; otherwise a validated torch.device."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UserError(f"unknown device {device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available; use 'cpu' or 'auto'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return dev


_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """A ``--dtype`` value as a torch.dtype (None for "auto"/None); UserError naming the allowed ones."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return None
    if dtype not in _DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; allowed: auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]
