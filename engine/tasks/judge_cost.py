"""Size and cost of a judge run before anything is sent (``python -m engine judge --dry-run``).

Input tokens are counted with ``tiktoken`` when it knows the model's encoding AND that encoding is
already on this machine (tiktoken downloads encodings from the internet on first use; nothing is
downloaded here); otherwise the estimate is characters / 4, and the result says which was used.
Chat overhead follows OpenAI's published accounting: 3 tokens per message plus 3 per request.
Output tokens are bounded above by ``max_tokens`` per request (a judge may stop earlier).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class CostEstimate:
    """Requests, estimated input tokens, an upper bound on output tokens, and the cost when priced
    (USD per million tokens in / out)."""

    n_requests: int
    input_tokens: int
    max_output_tokens: int
    method: str
    price_in: float | None = None
    price_out: float | None = None

    @property
    def cost(self) -> float | None:
        """Estimated input cost plus the output cost at the bound (an upper estimate)."""
        if self.price_in is None and self.price_out is None:
            return None
        return (
            self.input_tokens * (self.price_in or 0.0) + self.max_output_tokens * (self.price_out or 0.0)
        ) / 1e6

    def to_dict(self) -> dict:
        return {**asdict(self), "cost": self.cost}


def _chars(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _offline_encoding(name: str):
    """tiktoken's encoding ``name`` if its file is cached locally, else None (never downloads)."""
    import tiktoken
    import tiktoken.load as tl

    real = tl.read_file

    def refuse(blobpath: str) -> bytes:
        raise OSError(f"not cached: {blobpath}")

    tl.read_file = (
        refuse  # the cache is read by read_file_cached; a miss would call read_file (the network)
    )
    try:
        return tiktoken.get_encoding(name)
    except Exception:  # noqa: BLE001 - any failure means: not available offline
        return None
    finally:
        tl.read_file = real


def token_counter(model: str, encoding: Any = None) -> tuple[Callable[[str], int], str]:
    """(count(text) -> tokens, how): tiktoken where possible offline, else characters / 4 (said so).
    ``encoding``: a ``tiktoken.Encoding`` to count with instead of the model's cached one (tests:
    no encoding file is on a machine without internet)."""
    if encoding is not None:
        return (
            lambda text: len(encoding.encode(text, disallowed_special=()))
        ), f"tiktoken {encoding.name}"
    try:
        import tiktoken.model
    except ImportError:
        return _chars, "characters/4 estimate (tiktoken is not installed)"
    try:
        name = tiktoken.model.encoding_name_for_model(model)
    except KeyError:
        return _chars, f"characters/4 estimate (tiktoken does not know model {model!r})"
    enc = _offline_encoding(name)
    if enc is None:
        return _chars, (
            f"characters/4 estimate (tiktoken's {name} encoding is not on this machine and is "
            "not downloaded)"
        )
    return (lambda text: len(enc.encode(text, disallowed_special=()))), f"tiktoken {name}"


def estimate_cost(
    chats: Iterable[list[dict]],
    model: str,
    max_tokens: int,
    *,
    price_in: float | None = None,
    price_out: float | None = None,
    counter: tuple[Callable[[str], int], str] | None = None,
) -> CostEstimate:
    """Count the requests and their input tokens; ``max_tokens`` bounds each reply."""
    for name, p in (("--price-in", price_in), ("--price-out", price_out)):
        if p is not None and not (p >= 0 and math.isfinite(p)):
            from engine.errors import UserError

            raise UserError(f"{name} must be a finite price >= 0 (per million tokens), got {p}")
    count, how = counter or token_counter(model)
    n = tokens = 0
    for chat in chats:
        n += 1
        tokens += 3 + sum(3 + count(str(m.get("content", ""))) for m in chat)
    return CostEstimate(n, tokens, n * int(max_tokens), how, price_in, price_out)
