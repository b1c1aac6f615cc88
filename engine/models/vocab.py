"""Vocabulary identity: which models can share token-id noise keys (same string -> id mapping and
special ids), computed from tokenizers only, never weights."""

from __future__ import annotations

import functools
from pathlib import Path

from engine.errors import UserError
from engine.models.cache import cache_dir, converted_folder, quiet_hub, read_manifest
from engine.models.refs import resolve
from engine.models.registry import ModelSpec, base_spec
from engine.models.tokens import prepare_tokenizer, vocab_id

__all__ = ["vocab_id", "prepare_tokenizer", "vocab_id_of", "spec_vocab_id", "family_tokenizer"]


_SPEC_VOCAB: dict[str, str] = {}


def vocab_id_of(name_or_path: str, *, trust_remote_code: bool = False) -> str:
    """The vocabulary id of a registry name, HF folder, ``.gguf`` file or hub id, loading only the
    tokenizer (never the weights). UserError as :func:`load_model` for unknown names/paths."""
    from transformers import AutoTokenizer

    ref = resolve(name_or_path)
    if ref.kind == "registry":
        return spec_vocab_id(ref.spec)
    if ref.kind == "hub":  # the full loader's checks and messages
        from engine.models.loading import load_model

        return load_model(ref.name, device="cpu", trust_remote_code=trust_remote_code).vocab_id
    path = Path(ref.source)
    try:
        with quiet_hub():
            if ref.kind == "gguf":
                tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            else:
                tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"could not load the tokenizer of {str(name_or_path).strip()!r}: {exc}") from exc
    prepare_tokenizer(tok)
    return vocab_id(tok)


def spec_vocab_id(spec: ModelSpec) -> str:
    """The vocabulary id of a registry entry WITHOUT loading weights (tokenizer only).

    All variants of a family share the base tokenizer, so it is computed once per family: from the
    cache manifest when the base has been converted, else from the tokenizer alone.
    """
    if spec.family in _SPEC_VOCAB:
        return _SPEC_VOCAB[spec.family]
    manifest = read_manifest(cache_dir(spec.family))
    if manifest and manifest.get("vocab_id"):
        vid = manifest["vocab_id"]
    else:
        vid = vocab_id(family_tokenizer(spec))
    _SPEC_VOCAB[spec.family] = vid
    return vid


def family_tokenizer(spec: ModelSpec):
    """The tokenizer every variant of a registry model's family shares (no weights are loaded)."""
    with quiet_hub():
        return _base_tokenizer(base_spec(spec))


@functools.lru_cache(maxsize=4)  # the vocabulary check and the prompt-length check share one load
def _base_tokenizer(spec: ModelSpec):
    from transformers import AutoTokenizer

    base_cache = converted_folder(spec)
    if base_cache is not None:
        return AutoTokenizer.from_pretrained(str(base_cache))
    path = Path(spec.source)
    with quiet_hub():
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
