"""Serving layer: the OpenAI request bodies the server accepts, read into frozen dataclasses, and the
OpenAI-style error every refusal becomes (one status code, one clear message naming the field).

Parameters that would change the distribution in a way the keyed sampler does not implement exactly
(penalties, logit_bias, guided decoding, beam search, tools, ...) are refused rather than ignored:
a silently ignored penalty would give samples of another distribution under the same key. Unknown
fields are ignored (as vLLM does); the ones below are read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.serving import keys

N_MAX = 128  # choices per request
LOGPROBS_MAX = 20  # alternatives per token
STOP_MAX = 16  # stop strings per request
COMPLETIONS_MAX_TOKENS = 16  # OpenAI's default for /v1/completions (chat: up to the context)


class ApiError(Exception):
    """An OpenAI-style error: ``{"error": {"message", "type", "param", "code"}}`` with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        type_: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type_ or {
            401: "authentication_error",
            404: "not_found_error",
            409: "conflict_error",
            429: "rate_limit_error",
            503: "service_unavailable",
        }.get(status, "invalid_request_error" if status < 500 else "server_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        }


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


# field -> (its neutral value(s), why it is refused otherwise)
_REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "presence_penalty": ((None, 0, 0.0), "penalties change the distribution outside the keyed sampler"),
    "frequency_penalty": ((None, 0, 0.0), "penalties change the distribution outside the keyed sampler"),
    "repetition_penalty": (
        (None, 1, 1.0),
        "penalties change the distribution outside the keyed sampler",
    ),
    "length_penalty": ((None, 1, 1.0), "beam search is not sampling"),
    "logit_bias": ((None, {}), "logit_bias is not implemented in the keyed sampler"),
    "min_p": ((None, 0, 0.0), "min_p is not implemented in the keyed sampler (top_k and top_p are)"),
    "min_tokens": ((None, 0), "min_tokens would mask EOS outside the keyed sampler"),
    "ignore_eos": ((None, False), "ignore_eos is not supported"),
    "use_beam_search": ((None, False), "beam search is not sampling"),
    "suffix": ((None, ""), "suffix (insertion) is not supported"),
    "tools": ((None, []), "tools are not supported"),
    "functions": ((None, []), "functions are not supported"),
    "tool_choice": ((None, "none"), "tools are not supported"),
    "function_call": ((None, "none"), "functions are not supported"),
    "guided_json": ((None,), "guided decoding masks tokens outside the keyed sampler"),
    "guided_regex": ((None,), "guided decoding masks tokens outside the keyed sampler"),
    "guided_choice": ((None,), "guided decoding masks tokens outside the keyed sampler"),
    "guided_grammar": ((None,), "guided decoding masks tokens outside the keyed sampler"),
    "structured_outputs": ((None,), "structured outputs mask tokens outside the keyed sampler"),
    "bad_words": ((None, []), "bad_words masks tokens outside the keyed sampler"),
    "allowed_token_ids": ((None, []), "allowed_token_ids masks tokens outside the keyed sampler"),
    "logits_processors": ((None, []), "extra logits processors break coupling"),
    "prompt_logprobs": ((None,), "use echo with logprobs for prompt log-probabilities"),
    "add_special_tokens": (
        (None,),
        "add_special_tokens is not supported (text prompts get the tokenizer's default)",
    ),
    "audio": ((None,), "audio is not supported"),
    "modalities": ((None, ["text"]), "only text is supported"),
}


@dataclass(frozen=True)
class Request:
    """One completions or chat request, checked. ``max_tokens`` None: the endpoint's default;
    ``logprobs`` None: none, k >= 0: the chosen token's and k alternatives'."""

    endpoint: str  # keys.ENDPOINTS
    model: str
    questions: tuple[keys.Question, ...]
    seed: int | None
    n: int
    max_tokens: int | None
    stop: tuple[str, ...]
    logprobs: int | None
    echo: bool
    stream: bool
    include_usage: bool
    pin: keys.Pin | None

    def fields(self) -> dict[str, Any]:
        """The request's fields stored with each of its generations (``served.request``; not the model)."""
        return {
            "seed": self.seed,
            "n": self.n,
            "max_tokens": self.max_tokens,
            "stop": list(self.stop),
            "logprobs": self.logprobs,
            "echo": self.echo,
            "stream": self.stream,
        }


def _int(body: dict, name: str, lo: int, hi: int, default: int | None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise bad(f"{name} must be an integer in [{lo}, {hi}], got {v!r}", name)
    return v


def _refuse_unsupported(body: dict) -> None:
    for name, (neutral, why) in _REFUSED.items():
        v = body.get(name)
        if v is not None and v not in neutral:
            raise bad(f"unsupported parameter {name}={v!r}: {why}", name)
    rf = body.get("response_format")
    if rf is not None and not (isinstance(rf, dict) and rf.get("type") in (None, "text")):
        raise bad(
            f"unsupported response_format {rf!r}: only text (constrained formats mask tokens)",
            "response_format",
        )
    best_of = body.get("best_of")
    if best_of is not None and best_of != body.get("n", 1):
        raise bad(
            f"unsupported best_of={best_of!r}: every sample is returned (best_of must equal n)",
            "best_of",
        )


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > STOP_MAX:
        raise bad(f"stop must be a string or a list of at most {STOP_MAX} strings, got {stop!r}", "stop")
    return tuple(dict.fromkeys(s for s in stop if s))


def _logprobs(body: dict, endpoint: str) -> int | None:
    if endpoint == "completions":
        return _int(body, "logprobs", 0, LOGPROBS_MAX, None)
    lp = body.get("logprobs")
    if lp is not None and not isinstance(lp, bool):
        raise bad(f"logprobs must be true or false, got {lp!r}", "logprobs")
    top = _int(body, "top_logprobs", 0, LOGPROBS_MAX, None)
    if top is not None and not lp:
        raise bad("top_logprobs needs logprobs: true", "top_logprobs")
    return (top or 0) if lp else None


def parse(body: Any, endpoint: str) -> Request:
    """A request body read and checked (ApiError 400 naming the field otherwise)."""
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, got {type(body).__name__}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model must be a non-empty string (GET /v1/models lists the served models)", "model")
    _refuse_unsupported(body)
    try:
        questions = keys.questions(body, endpoint)
        seed = None if body.get("seed") is None else keys.check_seed(body.get("seed"))
        pin = keys.pinned(body, len(questions))
    except keys.RequestKeyError as exc:
        raise bad(str(exc), exc.param) from None
    n = _int(body, "n", 1, N_MAX, 1)
    assert n is not None
    if endpoint == "chat" and body.get("max_completion_tokens") is not None:
        max_tokens = _int(body, "max_completion_tokens", 1, 2**31 - 1, None)
    else:
        max_tokens = _int(
            body,
            "max_tokens",
            0,
            2**31 - 1,
            COMPLETIONS_MAX_TOKENS if endpoint == "completions" else None,
        )
    echo = body.get("echo", False) if endpoint == "completions" else False
    if not isinstance(echo, bool):
        raise bad(f"echo must be true or false, got {echo!r}", "echo")
    if max_tokens == 0 and not echo:
        raise bad("max_tokens must be >= 1 (0 only with echo: prompt log-probabilities)", "max_tokens")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad(f"stream must be true or false, got {stream!r}", "stream")
    if stream and echo:
        raise bad("echo is not supported with stream", "echo")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad(f"stream_options must be an object, got {opts!r}", "stream_options")
    return Request(
        endpoint=endpoint,
        model=model,
        questions=tuple(questions),
        seed=seed,
        n=n,
        max_tokens=max_tokens,
        stop=_stop(body),
        logprobs=_logprobs(body, endpoint),
        echo=echo,
        stream=stream,
        include_usage=bool(opts.get("include_usage", False)),
        pin=pin,
    )


def finite(x: float) -> float:
    """A log-probability as JSON can carry it (JSON has no -inf; -9999.0, as vLLM sends)."""
    return x if math.isfinite(x) else -9999.0
