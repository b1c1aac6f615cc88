"""Model references: "model name or path -> what it is and where its files are", written once.

:func:`resolve` turns what a user typed (a registry name, a local Hugging Face folder, a ``.gguf``
file, a hub id) into a frozen :class:`ModelRef`. The transformers loader, the backend checks
(engine.generation.backends) and the vLLM backend all start from it, so the GGUF spec (name =
file stem, family = stem, cached under a hash of its path) exists here only.

The dtype rule of both backends (one rule, so both load a checkpoint alike; tests/test_models.py) is
:meth:`ModelRef.default_dtype`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from engine.errors import UserError

Kind = Literal["registry", "gguf", "folder", "hub"]
_CONFIG_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelRef:
    """A resolved model reference (no weights loaded, nothing converted yet).

    name: the model's name in runs (registry name, file stem, folder name, hub id);
    kind: registry | gguf | folder | hub; source: the GGUF file, folder or hub id it comes from;
    variant: the registry variant, "gguf" or "hf"; family: the registry family (None otherwise).
    """

    name: str
    kind: Kind
    source: str
    variant: str
    family: str | None = None

    @property
    def spec(self):
        """The conversion-cache entry (registry and GGUF references), else None."""
        from engine.models.registry import ModelSpec, get_spec

        if self.kind == "registry":
            return get_spec(self.name)
        if self.kind == "gguf":
            return ModelSpec(
                name=self.name,
                source=self.source,
                variant="gguf",
                family=self.name,
                description=f"GGUF file {Path(self.source).name}",
            )
        return None

    def folder(self) -> Path | None:
        """The local Hugging Face folder with the weights: registry/GGUF converted once into the cache,
        a folder as is; None for a hub id."""
        if self.kind == "folder":
            return Path(self.source)
        spec = self.spec
        if spec is None:
            return None
        from engine.models.cache import ensure_cached

        return ensure_cached(spec)

    def config(self) -> dict | None:
        """config.json of :meth:`folder` as a dict; None for hub ids or an unreadable file."""
        folder = self.folder()
        if folder is None:
            return None
        try:
            return json.loads((folder / "config.json").read_text())
        except (OSError, ValueError):
            return None

    def default_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype both backends load this model in when no ``--dtype`` is given.

        CPU: float32 (bf16 matmuls are slow and inexact there), except the registry's bf16 variant.
        CUDA: the checkpoint's own ``torch_dtype`` for folders (bf16 for Llama-family checkpoints;
        bf16 when the config names none), bf16 for GGUF files and hub ids (their dequantized cache
        says float32 only because we wrote it so); the registry's family stays float32 so that its
        bf16 variant is a different model on every device.
        """
        if self.variant == "bf16":
            return torch.bfloat16
        if device.type != "cuda" or self.kind == "registry":
            return torch.float32
        if self.kind == "folder":
            cfg = self.config() or {}
            own = (
                cfg.get("torch_dtype")
                or cfg.get("dtype")
                or cfg.get("text_config", {}).get("torch_dtype")
            )
            return _CONFIG_DTYPES.get(str(own), torch.bfloat16)
        return torch.bfloat16


def looks_like_hub_id(s: str) -> bool:
    parts = s.split("/")
    return len(parts) == 2 and all(parts) and " " not in s


def resolve(ref: str | Path) -> ModelRef:
    """A registry name, a local HF folder (with config.json), a ``.gguf`` file or a hub id -> ModelRef.

    Raises:
        UserError: empty, a path that does not exist or is not a model, or an unknown name (the
            message lists the registry).
    """
    from engine.models.registry import get_spec, list_models

    s = str(ref).strip()
    specs = {sp.name: sp for sp in list_models()}
    if not s:
        raise UserError(f"empty model name; available: {', '.join(specs) or '(none)'}")
    if s in specs:
        sp = specs[s]
        return ModelRef(sp.name, "registry", sp.source, sp.variant, sp.family)
    path = Path(s).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return ModelRef(path.stem, "gguf", str(path.resolve()), "gguf")
    if path.is_dir():
        if not (path / "config.json").exists():
            raise UserError(f"folder {s!r} has no config.json: not a Hugging Face model folder")
        return ModelRef(path.name, "folder", str(path.resolve()), "hf")
    if path.suffix.lower() == ".gguf" or s.startswith((".", "/", "~")) or path.exists():
        raise UserError(f"model file or folder {s!r} not found (or not a .gguf file / model folder)")
    if looks_like_hub_id(s):
        return ModelRef(s, "hub", s, "hf")
    get_spec(s)  # raises the UserError listing the registry
    raise AssertionError("unreachable")


__all__ = ["ModelRef", "looks_like_hub_id", "resolve"]
