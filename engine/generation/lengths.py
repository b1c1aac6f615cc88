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


def tokenizer_and_context(model, trust_remote_code: bool = False):
    """(tokenizer, context length) of a registry name / folder / .gguf / LoadedModel, without its
    weights; (None, None) when unknown without loading the model (hub ids): not checked."""
    from transformers import AutoConfig, AutoTokenizer

    from engine.models import loading

    if not isinstance(model, (str, Path)):  # a loaded model
        return model.tokenizer, _context_of(model.model.config)
    name = str(model).strip()
    specs = {s.name: s for s in loading.list_models()}
    with loading._quiet_hub():
        if name in specs:
            spec = specs[name]
            base = loading.cache_dir(spec.family)
            tok = loading._family_tokenizer(spec)
            if loading._cache_valid(base, loading._base_spec(spec)):
                cfg = AutoConfig.from_pretrained(str(base))
            else:
                src = Path(spec.source)
                cfg = AutoConfig.from_pretrained(str(src.parent), gguf_file=src.name)
            return tok, _context_of(cfg)
        path = Path(name).expanduser()
        if path.is_file() and path.suffix.lower() == ".gguf":
            return (AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name),
                    _context_of(AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)))
        if path.is_dir() and (path / "config.json").exists():
            return (AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code),
                    _context_of(AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)))
    return None, None


def prompt_lengths(tokenizer, prompts: dict[str, str], system_prompt: str | None) -> dict[str, int]:
    """prompt_id -> number of tokens of its chat-templated text (as the generation loop feeds it)."""
    ids = list(prompts)
    texts = [chat_text(tokenizer, prompt_messages(prompts[p], system_prompt)) for p in ids]
    enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return {p: len(e) for p, e in zip(ids, enc)}


def too_long(models: Sequence, prompts: dict[str, str], system_prompt: str | None,
             max_new_tokens: int) -> dict[str, tuple[int, int, dict[str, int]]]:
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
        parts.append(f"{name}: {len(over)} prompt(s) + max_new_tokens {new} exceed its context of {ctx} tokens, "
                     f"e.g. {first}")
    return "; ".join(parts)


__all__ = ["tokenizer_and_context", "prompt_lengths", "too_long", "offenders_message"]
