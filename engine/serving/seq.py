"""Serving layer: one choice being generated (:class:`Seq`) and its text as it grows (stop strings,
streamed deltas). No torch: the request side builds these, the model's worker thread fills them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.generation.types import Unit


class ServedUnit(Unit):
    """A :class:`~engine.generation.types.Unit` that carries its :class:`Seq` (``.seq``) through the
    transformers loop's batch state, which knows units only. Equal to the plain unit (same key)."""

    seq: Seq


FINISHES = ("eos", "length", "stop", "cancelled", "error")  # a Seq's end; the first three are stored


@dataclass(eq=False)
class Seq:
    """One choice: its key, prompt tokens and sampling settings (set by the request side), and what
    the worker generated (filled in the worker thread; read after ``on_done``).

    ``logprobs``: None = none; k >= 0 = each token's model log-probability (temperature 1, no
    masking) and the k most likely alternatives. ``on_token(seq, delta)``: streaming only, called
    in the worker thread after each token with the text that became final.
    """

    unit: Unit
    prompt: list[int]
    temperature: float
    top_k: int
    top_p: float
    max_tokens: int
    on_done: Callable[[Seq], None]
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    trace_k: int = 0
    echo: bool = False
    on_token: Callable[[Seq, str], None] | None = None
    # ---- filled by the worker
    ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # under the sampling distribution
    token_logprobs: list[float] = field(default_factory=list)  # the model's (T = 1)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)  # trace: alternatives of the sampler
    top_probs: list[list[float]] = field(default_factory=list)
    top_gumbels: list[list[float]] = field(default_factory=list)
    prompt_logprobs: list[float | None] | None = None  # echo: per prompt token (the first: None)
    prompt_top: list[list[tuple[int, float]] | None] | None = None
    text: str = ""
    finish: str = ""  # FINISHES
    error: BaseException | None = None
    cancelled: bool = False  # set by the request side (a client that went away); read by the worker
    tracker: Any = None  # TextTracker when text is needed while generating

    @property
    def params(self) -> tuple[float, int, float, int]:
        """What the sampler is called with: rows sharing it are drawn together."""
        return (self.temperature, self.top_k, self.top_p, self.trace_k)

    def served_unit(self) -> ServedUnit:
        u = ServedUnit(*self.unit)
        u.seq = self
        return u


class TextTracker:
    """A choice's text while it grows: the earliest stop string ends it (the text stops before it),
    and :meth:`delta` gives the part that can no longer change (a possible start of a stop string,
    or an incomplete UTF-8 character, is held back until the next token or the end)."""

    def __init__(self, tokenizer, stop: tuple[str, ...], special: set[int]):
        self.tok, self.stop, self.special = tokenizer, tuple(s for s in stop if s), special
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.ids: list[int] = []
        self.text, self.sent = "", 0

    def push(self, token: int) -> bool:
        """Add a token; True when a stop string now ends the text."""
        if token not in self.special:
            self.ids.append(token)
        self.text = self.tok.decode(self.ids, skip_special_tokens=True)
        if self.stop:
            cut = min((i for i in (self.text.find(s) for s in self.stop) if i >= 0), default=-1)
            if cut >= 0:
                self.text = self.text[:cut]
                return True
        return False

    def delta(self, final: bool) -> str:
        """The text that became final since the last call."""
        end = len(self.text)
        if not final:
            end -= self.hold
            stripped = self.text[:end].rstrip("\ufffd")  # an incomplete multi-byte character
            end = len(stripped)
        if end <= self.sent:
            return ""
        out, self.sent = self.text[self.sent : end], end
        return out
