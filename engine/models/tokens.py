"""Tokenizer facts that need nothing but the tokenizer: its vocabulary id (which models can share
token-id noise keys) and the left-padding set-up every loader applies. A leaf of engine.models, so
the cache and the loader use it without importing :mod:`engine.models.vocab` (no import circle)."""

from __future__ import annotations

import hashlib
import json

from engine.errors import UserError


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
    added = sorted(
        int(i)
        for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()
        if getattr(t, "special", False)
    )
    h = hashlib.sha256()
    h.update(json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    h.update(json.dumps([special, added], sort_keys=True).encode("utf-8"))
    return h.hexdigest()[:16]


def prepare_tokenizer(tok, model=None) -> None:
    """Left padding and a pad token (the eos token when none), as every loader sets them."""
    tok.padding_side = "left"
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise UserError("the tokenizer has neither a pad nor an eos token; cannot left-pad batches")
        tok.pad_token = tok.eos_token
    if model is not None and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tok.pad_token_id
