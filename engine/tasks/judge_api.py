"""An OpenAI-compatible API judge: the ``openai`` client, N requests in flight, retries.

Speaks to anything with ``/v1/chat/completions`` and ``/v1/models`` (OpenAI, Azure-style gateways,
vLLM's and SGLang's servers, Ollama, LiteLLM proxies). Built by the command and handed to
:func:`engine.tasks.judge.judge_run`, which stores each :class:`Reply` as it arrives.

* Concurrency with back-pressure: ``concurrency`` worker coroutines take requests from a bounded
  queue (at most 2N prompts are built ahead of the replies).
* Retries: 429, 5xx, timeouts, connection errors and malformed replies are retried up to
  ``max_retries`` times with exponential backoff and full jitter, waiting at least the server's
  ``Retry-After`` (``retry-after-ms``; seconds or an HTTP date, anything else ignored) when it
  sends one, but never longer than ``max_retry_wait_s`` (default 60). Any other 4xx fails that
  request at once with its message. A request that fails for good becomes a Reply with ``error``
  set (stored as an unparseable verdict; a rerun sends it again), never an exception: the run goes on.
* Circuit breaker: ``breaker_after`` consecutive hard failures (401/403/404, or the server
  unreachable after all retries) stop the run with :class:`JudgeStopped` (one line naming the
  cause); requests not yet sent are not stored, so a rerun after the fix sends exactly those.
* The API key is read from the environment (``api_key_env``, default ``OPENAI_API_KEY``) and kept
  in this process's memory only: it is never stored, logged or shown, and scrubbed from messages.
  A variable name that looks like a key (:func:`looks_like_key`) is refused without being echoed.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import UserError

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL_ENV = "OPENAI_BASE_URL"
HARD_STATUS = (401, 403, 404)  # a wrong key, no access, no such model: retrying cannot help
# prefixes of common provider keys (OpenAI, Anthropic, Hugging Face, Groq, xAI, Google, GitHub,
# Replicate, JWTs)
KEY_PREFIXES = (
    "sk-",
    "sk_",
    "pk-",
    "rk-",
    "hf_",
    "gsk_",
    "xai-",
    "AIza",
    "ghp_",
    "github_pat_",
    "r8_",
    "eyJ",
    "key-",
)


class JudgeStopped(UserError):
    """The circuit breaker stopped an API judge run (one line: the cause and what to fix)."""


def looks_like_key(value: str) -> bool:
    """Whether ``value`` (typed where a variable's NAME belongs) may be a key itself: a known key
    prefix, anything but letters, digits and '_', or 20+ characters mixing letters and digits
    without the '_' that separates the words of a variable name (``AZURE_API_KEY_2024`` is a name).
    Such a value is never echoed in a message."""
    v = str(value or "").strip()
    if v.startswith(KEY_PREFIXES) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v or "-"):
        return bool(v)
    return len(v) >= 20 and "_" not in v and any(c.isdigit() for c in v) and any(c.isalpha() for c in v)


def shown_key_env(name: str) -> str:
    """``$NAME`` for a message, or a description when the name may be a key (never echoed)."""
    return (
        "the API key variable given (its name is not shown: it looks like a key)"
        if looks_like_key(name)
        else f"${name}"
    )


def key_env_problem(name: str, environ: Any = None) -> str | None:
    """Why ``name`` cannot supply the API key (never echoing a value that looks like a key), or None."""
    environ = os.environ if environ is None else environ
    if looks_like_key(name):
        return (
            "the API key variable must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
            "not the key; the value given looks like a key and is not shown"
        )
    if not str(name or "").isidentifier():
        return "the API key variable must be a variable name (letters, digits, _)"
    if not environ.get(name):
        return (
            f"{shown_key_env(name)} is not set; export it (the key is read from the environment only) "
            "or name another variable"
        )
    return None


def check_base_url(url: str | None, where: str = "--base-url") -> str | None:
    """``url`` unchanged, or a UserError when it has no ``http://`` / ``https://`` scheme."""
    if url is None or not str(url).strip():
        return None
    url = str(url).strip()
    if not url.lower().startswith(("http://", "https://")):
        raise UserError(
            f"{where} {url!r} has no scheme: http:// is missing (e.g. http://{url.split('://')[-1]})"
        )
    return url


@dataclass(frozen=True)
class Reply:
    """One judge reply (or failure): the text and what the server reported about the request."""

    text: str | None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    attempts: int = 1
    error: str | None = None


@dataclass(frozen=True)
class ApiJudgeConfig:
    """How to reach the judge. ``base_url`` None: the client's default (``$OPENAI_BASE_URL``, else
    OpenAI's). Backoff before retry k (1, 2, ...): uniform(0, min(backoff_max_s, backoff_base_s *
    2**(k-1))), and never less than the server's Retry-After capped at ``max_retry_wait_s``.
    ``breaker_after``: consecutive hard failures that stop the run (0: never)."""

    model: str
    base_url: str | None = None
    api_key_env: str = DEFAULT_KEY_ENV
    concurrency: int = 8
    max_retries: int = 5
    timeout_s: float = 60.0
    max_tokens: int = 1024
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    max_retry_wait_s: float = 60.0
    breaker_after: int = 5

    def __post_init__(self):
        if not self.model.strip():
            raise UserError("an API judge needs a model name: --judge openai:MODEL")
        for name, lo in (
            ("concurrency", 1),
            ("max_retries", 0),
            ("max_tokens", 1),
            ("breaker_after", 0),
        ):
            if int(getattr(self, name)) < lo:
                raise UserError(f"--{name.replace('_', '-')} must be >= {lo}, got {getattr(self, name)}")
        if not self.timeout_s > 0:
            raise UserError(f"--timeout must be > 0 seconds, got {self.timeout_s}")
        if not self.max_retry_wait_s >= 0:
            raise UserError(f"--max-retry-wait must be >= 0 seconds, got {self.max_retry_wait_s}")
        if looks_like_key(self.api_key_env) or not self.api_key_env.isidentifier():
            raise UserError(
                f"--api-key-env: {key_env_problem(self.api_key_env, {self.api_key_env: 'x'})}"
            )
        check_base_url(self.base_url)


@dataclass
class ApiStats:
    """Live request counters (for the progress file and the summary)."""

    requests: int = 0
    retries: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        dt = max(time.time() - self.started, 1e-9)
        return {
            "requests": self.requests,
            "retries": self.retries,
            "failed": self.failed,
            "requests_per_s": self.requests / dt,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def _seconds(text: Any, scale: float = 1.0) -> float | None:
    try:
        v = float(str(text).strip()) * scale
    except ValueError:
        return None
    return max(v, 0.0) if v == v and v != float("inf") else None  # NaN and inf: no usable wait


def retry_after_s(headers: Any, now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, else ``Retry-After`` as seconds or
    an HTTP date (RFC 9110); None for anything else ("5s", garbage: the backoff schedule applies)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None and (v := _seconds(ms, 1e-3)) is not None:
        return v
    ra = headers.get("retry-after")
    if ra is None or not str(ra).strip():
        return None
    if (v := _seconds(ra)) is not None:
        return v
    try:
        when = email.utils.parsedate_to_datetime(str(ra))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        when = when.replace(tzinfo=datetime.UTC)
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def backoff_s(attempt: int, cfg: ApiJudgeConfig, rng: random.Random, server_wait: float | None) -> float:
    """Wait before retry ``attempt`` (1-based): full jitter on an exponential cap, at least the
    server's Retry-After, which counts up to ``cfg.max_retry_wait_s`` only."""
    jittered = rng.uniform(0.0, min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (attempt - 1)))
    return max(jittered, min(server_wait or 0.0, cfg.max_retry_wait_s))


class ApiJudge:
    """An OpenAI-compatible judge. Call :meth:`preflight` first (one cheap request), then
    :meth:`run` over (key, messages) items."""

    def __init__(
        self,
        cfg: ApiJudgeConfig,
        *,
        seed: int = 0,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        require_key: bool = True,
    ):
        """``sleep``: the coroutine that waits between retries (tests pass one that records the
        schedule without waiting). ``require_key=False``: a missing key is not an error (a dry
        run's model check, which then asks without one)."""
        import openai  # a runtime requirement; imported here so the judge module stays light

        self.cfg, self._openai = cfg, openai
        key = os.environ.get(cfg.api_key_env)
        if not key and require_key:
            raise UserError(f"{key_env_problem(cfg.api_key_env)} or name another with --api-key-env")
        self._key = key or ""
        self.base_url = check_base_url(
            cfg.base_url or os.environ.get(DEFAULT_BASE_URL_ENV) or None,
            "--base-url" if cfg.base_url else f"${DEFAULT_BASE_URL_ENV}",
        )
        self.stats = ApiStats()
        self._rng = random.Random(seed)
        self._sleep = sleep or asyncio.sleep
        self._hard_in_a_row = 0

    def _client(self, async_: bool):
        kind = self._openai.AsyncOpenAI if async_ else self._openai.OpenAI
        return kind(
            api_key=self._key or "no-key",
            base_url=self.base_url,
            max_retries=0,
            timeout=self.cfg.timeout_s,
        )

    def scrub(self, text: str) -> str:
        """``text`` on one line, without the key (a server may echo what it received)."""
        text = str(text).replace(self._key, "***") if self._key else str(text)
        return " ".join(text.split())[:500]

    def preflight(self) -> str:
        """List the server's models (one cheap request) and check the judge model is among them;
        a server without ``GET /models`` (404) gets one 1-token chat request instead.

        Raises UserError (one line) for an unreachable server, a refused key (401/403), or a model
        the server does not list. Returns the base URL used (for the summary).
        """
        listed = self.served_models(chat_fallback=True)
        if listed is not None and self.cfg.model not in listed:
            raise UserError(self.not_listed(listed))
        return self.base_url or "default"

    def not_listed(self, listed: list[str]) -> str:
        shown = ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else "")
        return (
            f"the judge server at {self.where} does not list model {self.cfg.model!r}; "
            f"it serves: {shown or '(none)'}"
        )

    @property
    def where(self) -> str:
        return self.base_url or "the default OpenAI endpoint"

    def served_models(self, chat_fallback: bool = False) -> list[str] | None:
        """The ids ``GET /models`` lists; None when the server has no such endpoint (404) and
        ``chat_fallback`` is off (with it: one 1-token chat request checks the model instead).
        Raises UserError (one line) for an unreachable server, a refused key, an error status."""
        o, where = self._openai, self.where
        try:
            with self._client(False) as client:
                try:
                    return [m.id for m in client.models.list()]
                except (
                    o.NotFoundError
                ):  # a gateway without GET /models: one 1-token chat request instead
                    if not chat_fallback:
                        return None
                    client.post(
                        "/chat/completions",
                        cast_to=o.types.chat.ChatCompletion,
                        body={
                            "model": self.cfg.model,
                            "max_tokens": 1,
                            "messages": [{"role": "user", "content": "Reply with OK."}],
                        },
                    )
                    return [self.cfg.model]
        except o.NotFoundError as exc:
            raise UserError(
                f"the judge server at {where} does not serve model {self.cfg.model!r} (404): "
                f"{self.scrub(_message(exc))}"
            ) from None
        except o.AuthenticationError as exc:
            raise UserError(
                f"the judge server at {where} refused the key in {shown_key_env(self.cfg.api_key_env)} "
                f"(401): {self.scrub(_message(exc))}"
            ) from None
        except o.PermissionDeniedError as exc:
            raise UserError(
                f"the judge server at {where} denied access (403): {self.scrub(_message(exc))}"
            ) from None
        except (o.APIConnectionError, o.APITimeoutError) as exc:
            raise UserError(
                f"cannot reach the judge server at {where}: {self.scrub(str(exc))}; check --base-url"
            ) from None
        except o.APIStatusError as exc:
            raise UserError(
                f"the judge server at {where} answered {exc.status_code} to GET /models: "
                f"{self.scrub(_message(exc))}"
            ) from None

    def model_check(self) -> str:
        """A dry run's check (no chat request): one line saying whether the server lists the model."""
        try:
            listed = self.served_models(chat_fallback=False)
        except UserError as exc:
            return (
                f"not checked ({shown_key_env(self.cfg.api_key_env)} is not set): {exc}"
                if not self._key
                else f"not checked: {exc}"
            )
        if listed is None:
            return (
                f"not checked: the judge server at {self.where} has no model list (GET /models is 404)"
            )
        return (
            f"the server lists model {self.cfg.model!r}"
            if self.cfg.model in listed
            else self.not_listed(listed)
        )

    async def _once(self, client, messages: list[dict]) -> Reply:
        # the client's documented low-level call for POST /chat/completions (same errors, same typed
        # ChatCompletion): ``chat.completions.create`` first walks the params through its TypedDict
        # transform, a quarter of the judge's CPU at 600 requests/s (bench/bench_judge.py)
        resp = await client.post(
            "/chat/completions",
            cast_to=self._openai.types.chat.ChatCompletion,
            body={
                "model": self.cfg.model,
                "messages": messages,
                "temperature": 0.0,
                "max_tokens": self.cfg.max_tokens,
            },
        )
        usage = getattr(resp, "usage", None)
        pt = getattr(usage, "prompt_tokens", None) if usage is not None else None
        ct = getattr(usage, "completion_tokens", None) if usage is not None else None
        choices = getattr(resp, "choices", None) or []
        if not choices:
            return Reply(
                None, getattr(resp, "model", None), pt, ct, error="the server returned no choices"
            )
        text = getattr(choices[0].message, "content", None)
        return Reply(
            text,
            getattr(resp, "model", None),
            pt,
            ct,
            error=None if isinstance(text, str) else "the reply has no text content",
        )

    async def complete(self, client, messages: list[dict]) -> Reply:
        """One judgement with retries; never raises for a request's failure (it is in ``error``),
        except :class:`JudgeStopped` when the circuit breaker trips."""
        o, t0, attempt = self._openai, time.perf_counter(), 0
        while True:
            attempt += 1
            self.stats.requests += 1
            try:
                r = await self._once(client, messages)
                self._hard_in_a_row = 0
                self.stats.prompt_tokens += r.prompt_tokens or 0
                self.stats.completion_tokens += r.completion_tokens or 0
                return Reply(
                    r.text,
                    r.model,
                    r.prompt_tokens,
                    r.completion_tokens,
                    time.perf_counter() - t0,
                    attempt,
                    r.error,
                )
            except o.APIStatusError as exc:
                code = exc.status_code
                retryable = code == 429 or code >= 500 or code in (408, 409)
                err, wait = (
                    f"HTTP {code}: {self.scrub(_message(exc))}",
                    retry_after_s(exc.response.headers),
                )
                hard = code in HARD_STATUS
            except (o.APITimeoutError, o.APIConnectionError) as exc:
                retryable, err, wait = True, f"{type(exc).__name__}: {self.scrub(str(exc))}", None
                hard = True  # only once the retries are spent: the server stayed unreachable
            except (o.APIResponseValidationError, ValueError) as exc:  # a malformed body (bad JSON)
                retryable, err, wait, hard = (
                    True,
                    f"malformed reply: {self.scrub(str(exc))}",
                    None,
                    False,
                )
            if not retryable or attempt > self.cfg.max_retries:
                self._count_failure(hard, err)
                self.stats.failed += 1
                return Reply(None, None, None, None, time.perf_counter() - t0, attempt, err)
            self.stats.retries += 1
            await self._sleep(backoff_s(attempt, self.cfg, self._rng, wait))

    def _count_failure(self, hard: bool, err: str) -> None:
        """The circuit breaker: ``breaker_after`` hard failures in a row raise :class:`JudgeStopped`
        (that request is not stored: a rerun sends it); any other outcome resets the count."""
        self._hard_in_a_row = self._hard_in_a_row + 1 if hard else 0
        n = int(self.cfg.breaker_after)
        if hard and n and self._hard_in_a_row >= n:
            where = self.base_url or "the default OpenAI endpoint"
            raise JudgeStopped(
                f"stopped after {n} failed requests in a row at {where}: {err}; fix the cause "
                "(key, model name, --base-url) and rerun the same command: it sends only the "
                "requests not answered yet"
            )

    def run(
        self,
        items: Iterable[tuple[Any, list[dict]]],
        on_reply: Callable[[Any, Reply], None],
        flush: Callable[[], None] | None = None,
        flush_every_s: float = 0.25,
    ) -> None:
        """Judge every (key, messages) of ``items`` with ``concurrency`` requests in flight, calling
        ``on_reply(key, reply)`` (in this thread) as each finishes, and ``flush()`` in a worker thread
        every ``flush_every_s`` seconds (the store's writes never stall the requests). Ctrl-C cancels
        what is in flight."""
        asyncio.run(self._drive(iter(items), on_reply, flush, flush_every_s))

    async def _drive(self, items, on_reply, flush, every_s: float) -> None:
        n = int(self.cfg.concurrency)
        queue: asyncio.Queue = asyncio.Queue(maxsize=2 * n)  # back-pressure: prompts built just ahead

        async def produce():
            for item in items:
                await queue.put(item)
            for _ in range(n):
                await queue.put(None)

        async def work(client):
            while (item := await queue.get()) is not None:
                on_reply(item[0], await self.complete(client, item[1]))

        async def tick():
            while flush is not None:
                await asyncio.sleep(every_s)
                await asyncio.to_thread(flush)

        async with self._client(True) as client:
            tasks = [asyncio.create_task(produce())] + [
                asyncio.create_task(work(client)) for _ in range(n)
            ]
            ticker = asyncio.create_task(tick())
            try:
                await _until_done(tasks, ticker)
            finally:
                for t in [*tasks, ticker]:
                    t.cancel()


async def _until_done(tasks: list[asyncio.Task], ticker: asyncio.Task) -> None:
    """Wait for every task; an error in any of them (or in the ticker's flush) is raised at once."""
    pending = {*tasks, ticker}
    while pending - {ticker}:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            t.result()


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(exc, "message", None) or exc)
