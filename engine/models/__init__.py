"""Models layer: models. References (:mod:`.refs`: name or path -> ModelRef, the dtype rule of both
backends), the registry (:mod:`.registry`: the packaged SmolLM2-135M-Instruct and its local variants
that share its vocabulary), vocabulary ids (:mod:`.vocab`), device and dtype (:mod:`.devices`), the
conversion cache (:mod:`.cache`), loading into a LoadedModel (:mod:`.loading`), the weight-only
quantizers (:mod:`.quantize`), a tokenizer's vocabulary id and padding (:mod:`.tokens`) and the digest
of a model's weight files every run records (:mod:`.weights`).

Imports torch: command modules import it only inside the commands that load models.
"""

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
from engine.models.vocab import family_tokenizer, prepare_tokenizer, spec_vocab_id, vocab_id, vocab_id_of

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
