"""Compute layer: models. The registry (the packaged SmolLM2-135M-Instruct and its local variants
that share its vocabulary), loading from folders / GGUF files / hub ids, the conversion cache
(:mod:`.loading`) and the weight-only quantizers (:mod:`.quantize`).

Imports torch: command modules import it only inside the commands that load models.
"""

from engine.models.loading import (
                                   CONVERSIONS,
                                   DEFAULT_FAMILY,
                                   DEFAULT_MODEL,
                                   MANIFEST,
                                   VARIANTS,
                                   LoadedModel,
                                   ModelSpec,
                                   bitsandbytes_available,
                                   cache_dir,
                                   cache_root,
                                   default_device,
                                   default_dtype,
                                   ensure_cached,
                                   from_objects,
                                   get_spec,
                                   is_cached,
                                   list_models,
                                   load_model,
                                   prepare_tokenizer,
                                   resolve_device,
                                   smollm2_gguf_path,
                                   spec_vocab_id,
                                   vocab_id,
                                   vocab_id_of,
)
from engine.models.quantize import (
                                   INT4_GROUP,
                                   quantize_gguf,
                                   quantize_int4_grouped,
                                   quantize_int8_per_channel,
                                   quantize_linear_weights,
)

__all__ = ["CONVERSIONS", "DEFAULT_FAMILY", "DEFAULT_MODEL", "MANIFEST", "VARIANTS", "INT4_GROUP", "LoadedModel",
           "ModelSpec", "bitsandbytes_available", "cache_dir", "cache_root", "default_device", "default_dtype",
           "ensure_cached", "prepare_tokenizer", "from_objects", "get_spec", "is_cached", "list_models", "load_model",
           "resolve_device",
           "smollm2_gguf_path", "spec_vocab_id", "vocab_id", "vocab_id_of", "quantize_gguf",
           "quantize_int4_grouped", "quantize_int8_per_channel", "quantize_linear_weights"]
