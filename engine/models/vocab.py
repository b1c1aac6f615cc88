"""Vocabulary identity: which models can share token-id noise keys (same string -> id mapping and
special ids), computed from tokenizers only, never weights."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from engine.errors import UserError
from engine.models.cache import cache_dir, converted_folder, quiet_hub, read_manifest
from engine.models.refs import resolve
from engine.models.registry import ModelSpec, base_spec


def vocab_id(tokenizer) -> str:
    """Stable short hash (16 hex) of the token-string -> id mapping and the special-token ids.

    Two tokenizers get the same id iff they map the same strings to the same ids and mark the same
    ids special (bos/eos/unk and added special tokens), i.e. iff token-id noise keys couple them.
    The pad token is excluded: it is never sampled and loaders set it to eos when missing.
    """
    vocab = tokenizer.get_vocab()  # includes added tokens
    items = sorted(vocab.items(), key=lambda kv: kv[1])
    special = {}
    for attr in ("bos_token_id", "eos_token_id", "unk_token_id"):
        special[attr] = getattr(tokenizer, attr, None)
    added = sorted(int(i) for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()
                   if getattr(t, "special", False))
    h = hashlib.sha256()
    h.update(json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    h.update(json.dumps([special, added], sort_keys=True).encode("utf-8"))
    return h.hexdigest()[:16]


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


def prepare_tokenizer(tok, model=None) -> None:
    """Left padding and a pad token (the eos token when none), as every loader sets them."""
    tok.padding_side = "left"
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise UserError("the tokenizer has neither a pad nor an eos token; cannot left-pad batches")
        tok.pad_token = tok.eos_token
    if model is not None and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tok.pad_token_id
