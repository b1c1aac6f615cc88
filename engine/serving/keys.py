"""Serving layer: the key rule of docs/METHODS.md 1.6 (the key is the request), standard library only.

A harness that talks to the server knows nothing of units or repeats, so a request's noise key is
derived from the request alone (the vLLM logits processor imports this module in its workers too,
hence no torch, no numpy):

    prompt id = "req-" + blake2b-96( canonical JSON of {endpoint, prompt | messages, T, top_p, top_k} )
    seed      = the request's ``seed``, else the server's ``--seed``
                (``--noise independent``: blake2b("independent:{seed}:{model}") >> 1, as METHODS 1.3)
    repeat    = the occurrence index of (seed, prompt id) for that model in the served run; a request
                with ``n > 1`` takes the next n repeats, choice i the i-th

*What the client sent*: a completion's prompt text or token-id list (each prompt of a batched
``prompt`` list is its own question), or a chat's messages as (role, content) pairs before any chat
template (text content parts joined with "\\n", as vLLM joins them). *The fields that make it the same
question*: temperature (default 1.0, OpenAI's), top_p (default 1.0) and top_k (None, 0 or -1 = off),
normalised so that an omitted field and its default give one id. Not part of it: ``model`` (two
models asked the same thing must draw the same noise), ``max_tokens``, ``stop``, ``n``, ``logprobs``,
``echo``, ``stream`` and ``seed`` (separate: it is the key's seed).

A client may pin the key: ``"coupling": {"prompt_id": "q17", "repeat": 3}`` in the body (the
``openai`` client's ``extra_body``); ``repeat`` is optional (omitted: the occurrence counter of that
prompt id). The key then never depends on the request's content.

:class:`Occurrences` holds the repeat counters of a served run: every repeat stored or in flight is
taken, a request takes the smallest free ones, and a request that fails or is cancelled gives its
repeats back. Loaded from the stored rows at start, so a restarted server continues them, and a
request that was in flight when the server was killed gets, when retried, the repeat it would have
had (nothing was stored for it).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

KEY_FIELD = "coupling"  # the body field (openai client: extra_body) that pins a key
KEY_RULE = "request-v1"  # recorded with a served run: which rule made its prompt ids
ENDPOINTS = ("completions", "chat")
NOISES = ("coupled", "independent")
SEED_MAX = 2**63  # seeds in [0, 2^63), as engine.config.SEED_MAX
PIN_ID_MAX = 200  # longest pinned prompt id
DEFAULT_TEMPERATURE = 1.0  # OpenAI's defaults for an omitted field
DEFAULT_TOP_P = 1.0


class RequestKeyError(ValueError):
    """A request field the key rule cannot read; the message names the field and what is allowed
    (the server answers it as a 400)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class SeedConflict(ValueError):
    """A served run holds a prompt id under one seed and a request asks it under another (the
    stored unit (prompt id, repeat) would mean two different noises)."""


@dataclass(frozen=True)
class Question:
    """What defines "the same question" (METHODS 1.6): the prompt as sent and the sampling fields.

    ``content``: a prompt string, a tuple of token ids, or a tuple of (role, content) pairs.
    """

    endpoint: str
    content: str | tuple[int, ...] | tuple[tuple[str, str], ...]
    temperature: float
    top_p: float
    top_k: int

    def canonical(self) -> bytes:
        """The bytes hashed into the prompt id (JSON, sorted keys, no spaces, UTF-8)."""
        content: Any = self.content
        if isinstance(content, tuple):
            content = [list(c) if isinstance(c, tuple) else c for c in content]
        obj = {
            "rule": KEY_RULE,
            "endpoint": self.endpoint,
            "content": content,
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "top_k": int(self.top_k),
        }
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def messages(self) -> tuple[tuple[str, str], ...]:
        """A chat question's (role, content) pairs."""
        if self.endpoint != "chat":
            raise ValueError(f"a {self.endpoint} question has no messages")
        return cast(tuple[tuple[str, str], ...], self.content)

    @property
    def prompt_id(self) -> str:
        return "req-" + hashlib.blake2b(self.canonical(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Pin:
    """A key the client pinned: its prompt id and, optionally, its first repeat."""

    prompt_id: str
    repeat: int | None = None


# ---------------------------------------------------------------------------- reading a request


def _number(body: dict, name: str, default: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RequestKeyError(f"{name} must be a finite number, got {v!r}", name)
    return float(v)


def sampling_fields(body: dict) -> tuple[float, float, int]:
    """(temperature, top_p, top_k) of a request with OpenAI's defaults; top_k None/0/-1 = off (0)."""
    t = _number(body, "temperature", DEFAULT_TEMPERATURE)
    if t < 0:
        raise RequestKeyError(f"temperature must be >= 0 (0 = greedy), got {t!r}", "temperature")
    p = _number(body, "top_p", DEFAULT_TOP_P)
    if not 0 < p <= 1:
        raise RequestKeyError(f"top_p must be in (0, 1] (1 = off), got {p!r}", "top_p")
    k = body.get("top_k")
    if k is None:
        k = 0
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, int) or k < -1:
        raise RequestKeyError(
            f"top_k must be an integer >= 1, or 0 / -1 / null for off; got {k!r}", "top_k"
        )
    return t, p, max(k, 0)


def _token_ids(x: list, where: str) -> tuple[int, ...]:
    if not x:
        raise RequestKeyError(f"{where} is an empty token list", "prompt")
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in x):
        raise RequestKeyError(f"{where} must hold non-negative integer token ids", "prompt")
    return tuple(x)


def completion_prompts(prompt: Any) -> list[str | tuple[int, ...]]:
    """The prompts of a completions request: a string, a token-id list, or a list of either."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [_token_ids(prompt, "prompt")]
        out: list[str | tuple[int, ...]] = []
        for i, p in enumerate(prompt):
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, list):
                out.append(_token_ids(p, f"prompt[{i}]"))
            else:
                raise RequestKeyError(
                    f"prompt[{i}] must be a string or a list of token ids, got {type(p).__name__}",
                    "prompt",
                )
        return out
    raise RequestKeyError(
        "prompt must be a string, a list of token ids, or a non-empty list of strings or of token-id "
        f"lists; got {type(prompt).__name__ if not isinstance(prompt, list) else 'an empty list'}",
        "prompt",
    )


def _content_text(content: Any, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestKeyError(
                    f"messages[{i}].content: only text parts are supported, got {kind!r}", "messages"
                )
            parts.append(part["text"])
        return "\n".join(parts)
    raise RequestKeyError(
        f"messages[{i}].content must be a string or a list of text parts, got {type(content).__name__}",
        "messages",
    )


def chat_messages(messages: Any) -> tuple[tuple[str, str], ...]:
    """A chat request's messages as (role, content) pairs, text parts joined with "\\n"."""
    if not isinstance(messages, list) or not messages:
        raise RequestKeyError("messages must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestKeyError(f"messages[{i}] must be an object with a string role", "messages")
        out.append((m["role"], _content_text(m.get("content"), i)))
    return tuple(out)


def questions(body: dict, endpoint: str) -> list[Question]:
    """The questions of a request body (one per prompt of a batched completions request)."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; allowed: {', '.join(ENDPOINTS)}")
    t, p, k = sampling_fields(body)
    if endpoint == "chat":
        return [Question("chat", chat_messages(body.get("messages")), t, p, k)]
    return [Question("completions", c, t, p, k) for c in completion_prompts(body.get("prompt"))]


def check_seed(seed: Any, name: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_MAX:
        raise RequestKeyError(f"{name} must be an integer in [0, 2^63), got {seed!r}", name)
    return seed


def request_seed(body: dict, server_seed: int) -> int:
    """The key's seed: the request's ``seed``, else the server's."""
    s = body.get("seed")
    return check_seed(server_seed, "--seed") if s is None else check_seed(s)


def model_seed(seed: int, model: str, noise: str) -> int:
    """The seed a model draws with: ``seed`` (coupled), or blake2b("independent:{seed}:{model}")
    truncated to 63 bits (independent; the same as engine.sampling.noise.independent_seed)."""
    if noise not in NOISES:
        raise ValueError(f"unknown noise {noise!r}; allowed: {', '.join(NOISES)}")
    if noise == "coupled":
        return seed
    h = hashlib.blake2b(f"independent:{seed}:{model}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def pinned(body: dict, n_prompts: int) -> Pin | None:
    """The key a client pinned (``"coupling": {"prompt_id", "repeat"}``), None when none."""
    raw = body.get(KEY_FIELD)
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"prompt_id", "repeat"}:
        raise RequestKeyError(
            f'{KEY_FIELD} must be an object {{"prompt_id": str, "repeat": int (optional)}}, got {raw!r}',
            KEY_FIELD,
        )
    pid, rep = raw.get("prompt_id"), raw.get("repeat")
    if not isinstance(pid, str) or not 0 < len(pid) <= PIN_ID_MAX:
        raise RequestKeyError(
            f"{KEY_FIELD}.prompt_id must be a string of 1 to {PIN_ID_MAX} characters, got {pid!r}",
            KEY_FIELD,
        )
    if rep is not None and (isinstance(rep, bool) or not isinstance(rep, int) or rep < 0):
        raise RequestKeyError(f"{KEY_FIELD}.repeat must be an integer >= 0, got {rep!r}", KEY_FIELD)
    if n_prompts != 1:
        raise RequestKeyError(f"{KEY_FIELD} pins one prompt; this request has {n_prompts}", KEY_FIELD)
    return Pin(pid, rep)


# ---------------------------------------------------------------------------- occurrence counters


Slot = tuple[str, str, str]  # (model, mode, prompt id): the stored unit's identity without the repeat


class _Counter:
    __slots__ = ("seed", "taken", "low")

    def __init__(self, seed: int):
        self.seed, self.low = seed, 0  # every repeat < low is taken
        self.taken: set[int] = set()

    def free(self, n: int) -> list[int]:
        out: list[int] = []
        r = self.low
        while len(out) < n:
            if r not in self.taken:
                out.append(r)
            r += 1
        return out

    def advance(self) -> None:
        while self.low in self.taken:
            self.low += 1


class Occurrences:
    """The repeat counters of one served run: per (model, mode, prompt id) its seed and the repeats
    taken (stored or in flight). Thread-safe.

    A slot holds one seed: its stored rows are keyed (prompt id, repeat), so the same prompt id
    under another seed would give one unit two noises (:class:`SeedConflict`, a 409).
    """

    def __init__(self, stored: Iterable[tuple[str, str, str, int, int]] = ()):
        """``stored``: (model, mode, prompt id, repeat, seed) of the run's stored generations."""
        self._slots: dict[Slot, _Counter] = {}
        self._lock = threading.Lock()
        for model, mode, pid, rep, seed in stored:
            c = self._slots.setdefault((model, mode, pid), _Counter(int(seed)))
            c.taken.add(int(rep))
        for c in self._slots.values():
            c.advance()

    def _slot(self, slot: Slot, seed: int) -> _Counter:
        c = self._slots.get(slot)
        if c is not None and c.seed != seed:
            if c.taken:
                raise SeedConflict(
                    f"this served run already holds prompt {slot[2]} for model {slot[0]!r} under seed "
                    f"{c.seed}; seed {seed} would give its units a second noise: ask with seed "
                    f"{c.seed}, or serve another --run"
                )
            c = None
        if c is None:
            c = self._slots[slot] = _Counter(seed)
        return c

    def take(self, slot: Slot, seed: int, n: int) -> tuple[int, ...]:
        """The next ``n`` free repeats of ``slot`` (the smallest not taken), now taken."""
        with self._lock:
            c = self._slot(slot, seed)
            got = c.free(n)
            c.taken.update(got)
            c.advance()
            return tuple(got)

    def pin(self, slot: Slot, seed: int, repeats: Sequence[int]) -> tuple[int, ...]:
        """Mark pinned repeats taken; returns those that were free (the ones to give back on failure)."""
        with self._lock:
            c = self._slot(slot, seed)
            new = tuple(r for r in repeats if r not in c.taken)
            c.taken.update(new)
            c.advance()
            return new

    def release(self, slot: Slot, repeats: Iterable[int]) -> None:
        """Give back the repeats of a request that stored nothing (failed or cancelled)."""
        with self._lock:
            c = self._slots.get(slot)
            if c is None:
                return
            for r in repeats:
                c.taken.discard(r)
                c.low = min(c.low, r)

    def taken(self, slot: Slot) -> tuple[int, ...]:
        with self._lock:
            c = self._slots.get(slot)
            return tuple(sorted(c.taken)) if c else ()
