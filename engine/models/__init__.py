"""Models layer: models. References (:mod:`.refs`: name or path -> ModelRef, the dtype rule of both
backends), the registry (:mod:`.registry`: the packaged SmolLM2-135M-Instruct and its local variants
that share its vocabulary), vocabulary ids (:mod:`.vocab`), device and dtype (:mod:`.devices`), the
conversion cache (:mod:`.cache`), loading into a LoadedModel (:mod:`.loading`), the weight-only
quantizers (:mod:`.quantize`), a tokenizer's vocabulary id and padding (:mod:`.tokens`) and the digest
of a model's weight files every run records (:mod:`.weights`).

Its modules import torch (all but :mod:`.registry`): command modules use them only inside the commands
that load models. The package itself is lazy: importing it (or the torch-free :mod:`.registry`) loads
nothing heavy; each name below is imported on first use, so the dashboard lists models without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_getattr

if TYPE_CHECKING:  # the names, for type checkers and readers; loaded on first use
    from engine.models.cache import (
        CONVERSIONS,
        MANIFEST,
        cache_dir,
        cache_root,
        converted_folder,
        ensure_cached,
        is_cached,
        quiet_hub,
    )
    from engine.models.devices import default_device, parse_dtype, resolve_device
    from engine.models.loading import LoadedModel, from_objects, load_model
    from engine.models.quantize import (
        INT4_GROUP,
        quantize_gguf,
        quantize_int4_grouped,
        quantize_int8_per_channel,
        quantize_linear_weights,
    )
    from engine.models.refs import ModelRef, resolve
    from engine.models.registry import (
        DEFAULT_FAMILY,
        DEFAULT_MODEL,
        VARIANTS,
        ModelSpec,
        bitsandbytes_available,
        get_spec,
        list_models,
        smollm2_gguf_path,
    )
    from engine.models.vocab import (
        family_tokenizer,
        prepare_tokenizer,
        spec_vocab_id,
        vocab_id,
        vocab_id_of,
    )

_EXPORTS: dict[str, str] = {
    "CONVERSIONS": "engine.models.cache",
    "MANIFEST": "engine.models.cache",
    "cache_dir": "engine.models.cache",
    "cache_root": "engine.models.cache",
    "converted_folder": "engine.models.cache",
    "ensure_cached": "engine.models.cache",
    "is_cached": "engine.models.cache",
    "quiet_hub": "engine.models.cache",
    "default_device": "engine.models.devices",
    "parse_dtype": "engine.models.devices",
    "resolve_device": "engine.models.devices",
    "LoadedModel": "engine.models.loading",
    "from_objects": "engine.models.loading",
    "load_model": "engine.models.loading",
    "INT4_GROUP": "engine.models.quantize",
    "quantize_gguf": "engine.models.quantize",
    "quantize_int4_grouped": "engine.models.quantize",
    "quantize_int8_per_channel": "engine.models.quantize",
    "quantize_linear_weights": "engine.models.quantize",
    "ModelRef": "engine.models.refs",
    "resolve": "engine.models.refs",
    "DEFAULT_FAMILY": "engine.models.registry",
    "DEFAULT_MODEL": "engine.models.registry",
    "VARIANTS": "engine.models.registry",
    "ModelSpec": "engine.models.registry",
    "bitsandbytes_available": "engine.models.registry",
    "get_spec": "engine.models.registry",
    "list_models": "engine.models.registry",
    "smollm2_gguf_path": "engine.models.registry",
    "family_tokenizer": "engine.models.vocab",
    "prepare_tokenizer": "engine.models.vocab",
    "spec_vocab_id": "engine.models.vocab",
    "vocab_id": "engine.models.vocab",
    "vocab_id_of": "engine.models.vocab",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())  # PEP 562: imported on first use


__all__ = [
    "CONVERSIONS",
    "DEFAULT_FAMILY",
    "DEFAULT_MODEL",
    "MANIFEST",
    "VARIANTS",
    "INT4_GROUP",
    "LoadedModel",
    "ModelRef",
    "ModelSpec",
    "bitsandbytes_available",
    "cache_dir",
    "cache_root",
    "converted_folder",
    "default_device",
    "ensure_cached",
    "family_tokenizer",
    "from_objects",
    "get_spec",
    "is_cached",
    "list_models",
    "quiet_hub",
    "load_model",
    "parse_dtype",
    "prepare_tokenizer",
    "resolve",
    "resolve_device",
    "smollm2_gguf_path",
    "spec_vocab_id",
    "vocab_id",
    "vocab_id_of",
    "quantize_gguf",
    "quantize_int4_grouped",
    "quantize_int8_per_channel",
    "quantize_linear_weights",
]
