"""Chat prompts: the messages of a prompt, the chat-template string, the stop tokens of a model."""

from __future__ import annotations

from collections.abc import Sequence

from engine.generation.types import Unit


def chat_text(tokenizer, messages: list[dict]) -> str:
    """The prompt string for a chat (``[{"role", "content"}, ...]``) with the generation prompt.

    Falls back to folding the system message into the user turn when the template rejects a
    system role, and to plain concatenation when the tokenizer has no chat template.
    """
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception:  # templates raise their own error types (e.g. "system role not supported")
            if messages and messages[0]["role"] == "system" and len(messages) > 1:
                merged = [
                    {
                        "role": messages[1]["role"],
                        "content": messages[0]["content"] + "\n\n" + messages[1]["content"],
                    }
                ] + messages[2:]
                return tokenizer.apply_chat_template(merged, add_generation_prompt=True, tokenize=False)
            raise
    return "\n\n".join(m["content"] for m in messages) + "\n"


def prompt_messages(user_prompt: str, system_prompt: str | None) -> list[dict]:
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return msgs + [{"role": "user", "content": user_prompt}]


def stop_token_ids(lm) -> set[int]:
    """Token ids that end a generation: the tokenizer's and the generation config's EOS ids."""
    return eos_ids(lm.tokenizer, getattr(lm.model, "generation_config", None))


def eos_ids(tokenizer, generation_config) -> set[int]:
    """The stop rule of both backends: the tokenizer's eos id and the generation config's eos ids."""
    ids: set[int] = set()
    for src in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(generation_config, "eos_token_id", None),
    ):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(i) for i in src)
    return ids


def group_units(prompts, units: Sequence[Unit]) -> tuple[dict[str, str], list[Unit]]:
    """Check a backend call's inputs and order its units by prompt (first appearance), so a
    prompt's units run together and share its prefill / cached prefix.

    Args:
        prompts: prompt_id -> user prompt, or objects with .prompt_id and .user_prompt.
        units: the units to generate (each with its noise seed).
    Returns:
        (prompt_id -> user prompt, the units grouped by prompt).
    """
    from engine.errors import UserError

    if not isinstance(prompts, dict):
        prompts = {p.prompt_id: p.user_prompt for p in prompts}
    missing = sorted({u[0] for u in units} - set(prompts))
    if missing:
        raise UserError(f"units refer to unknown prompt ids: {missing[:5]}")
    order: dict[str, list[Unit]] = {}
    for p, r, sd in units:
        order.setdefault(p, []).append(Unit(p, int(r), int(sd)))
    return prompts, [u for us in order.values() for u in us]
