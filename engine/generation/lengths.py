"""Prompt length vs the model's context, checked before a run starts (tokenizer and config only,
never the weights), so a too-long prompt is one clear error instead of a crash hours in.

A prompt fits when len(chat-templated prompt tokens) + max_new_tokens <= the model's context
(``max_position_embeddings`` or its synonyms in the model config). Prompts are tokenized exactly
as :mod:`engine.generation.hf` does (chat template with the system prompt, no added specials).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engine.generation.prompts import chat_text, prompt_messages

_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
N_LISTED = 5  # offenders named in the error


def _context_of(config) -> int | None:
    for k in _CONTEXT_KEYS:
        v = getattr(config, k, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # scalar value types
_GGUF_INTS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}


def gguf_context(path: str | Path) -> int | None:
    """``<arch>.context_length`` from a GGUF file's header (key-value section only: no tensors, no
    tokenizer built; transformers' GGUF config loader parses the whole vocabulary, ~10x slower)."""
    import mmap
    import struct

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            return None
        (n_kv,) = struct.unpack_from("<Q", m, 16)
        off = 24

        def string(o: int) -> tuple[bytes, int]:
            (n,) = struct.unpack_from("<Q", m, o)
            return m[o + 8 : o + 8 + n], o + 8 + n

        def skip(t: int, o: int) -> int:
            if t == 8:
                return string(o)[1]
            if t == 9:
                et, cnt = struct.unpack_from("<IQ", m, o)
                o += 12
                if et in _GGUF_SIZES:
                    return o + cnt * _GGUF_SIZES[et]
                for _ in range(cnt):
                    o = skip(et, o)
                return o
            return o + _GGUF_SIZES[t]

        for _ in range(n_kv):
            key, off = string(off)
            (t,) = struct.unpack_from("<I", m, off)
            off += 4
            if key.endswith(b".context_length") and t in _GGUF_INTS:
                return int(struct.unpack_from(_GGUF_INTS[t], m, off)[0])
            off = skip(t, off)
    return None


def tokenizer_and_context(model, trust_remote_code: bool = False):
    """(tokenizer, context length) of a registry name / folder / .gguf / LoadedModel, without its
    weights; (None, None) when unknown without loading the model (hub ids): not checked."""
    from transformers import AutoConfig, AutoTokenizer

    from engine import models

    if not isinstance(model, (str, Path)):  # a loaded model
        return model.tokenizer, _context_of(model.model.config)
    name = str(model).strip()
    specs = {s.name: s for s in models.list_models()}
    with models.quiet_hub():
        if name in specs:
            spec = specs[name]
            tok = models.family_tokenizer(spec)
            base = models.converted_folder(spec)
            if base is not None:
                return tok, _context_of(AutoConfig.from_pretrained(str(base)))
            return tok, gguf_context(spec.source)
        path = Path(name).expanduser()
        if path.is_file() and path.suffix.lower() == ".gguf":
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name), gguf_context(
                path
            )
        if path.is_dir() and (path / "config.json").exists():
            return (
                AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code),
                _context_of(AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)),
            )
    return None, None


def prompt_lengths(tokenizer, prompts: dict[str, str], system_prompt: str | None) -> dict[str, int]:
    """prompt_id -> number of tokens of its chat-templated text (as the generation loop feeds it)."""
    ids = list(prompts)
    texts = [chat_text(tokenizer, prompt_messages(prompts[p], system_prompt)) for p in ids]
    enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return {p: len(e) for p, e in zip(ids, enc)}


def too_long(
    models: Sequence, prompts: dict[str, str], system_prompt: str | None, max_new_tokens: int
) -> dict[str, tuple[int, int, dict[str, int]]]:
    """Per model name: (context, max_new_tokens, {prompt_id: length} of the prompts that do not fit).

    Models whose context is unknown without loading them are skipped (not in the result).
    """
    out = {}
    for m in models:
        name = m if isinstance(m, str) else m.name
        tok, ctx = tokenizer_and_context(m)
        if tok is None or ctx is None:
            continue
        lens = prompt_lengths(tok, prompts, system_prompt)
        out[name] = (ctx, max_new_tokens, {p: n for p, n in lens.items() if n + max_new_tokens > ctx})
    return out


def offenders_message(bad: dict[str, tuple[int, int, dict[str, int]]]) -> str:
    """One line naming, per model, how many prompts do not fit and the first few with their lengths."""
    parts = []
    for name, (ctx, new, over) in bad.items():
        if not over:
            continue
        first = ", ".join(f"{p} ({n} tokens)" for p, n in list(over.items())[:N_LISTED])
        parts.append(
            f"{name}: {len(over)} prompt(s) + max_new_tokens {new} exceed its context of {ctx} tokens, "
            f"e.g. {first}"
        )
    return "; ".join(parts)


__all__ = ["tokenizer_and_context", "prompt_lengths", "too_long", "offenders_message"]
