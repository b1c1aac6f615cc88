"""An OpenAI-compatible API judge: the ``openai`` client, N requests in flight, retries.

Speaks to anything with ``/v1/chat/completions`` and ``/v1/models`` (OpenAI, Azure-style gateways,
vLLM's and SGLang's servers, Ollama, LiteLLM proxies). Built by the command and handed to
:func:`engine.tasks.judge.judge_run`, which stores each :class:`Reply` as it arrives.

* Concurrency with back-pressure: ``concurrency`` worker coroutines take requests from a bounded
  queue (at most 2N prompts are built ahead of the replies).
* Retries: 429, 5xx, timeouts, connection errors and malformed replies are retried up to
  ``max_retries`` times with exponential backoff and full jitter, waiting at least the server's
  ``Retry-After`` (``retry-after-ms``) when it sends one. Any other 4xx fails that request at once
  with its message. A request that fails for good becomes a Reply with ``error`` set (stored as an
  unparseable verdict), never an exception: the run goes on.
* The API key is read from the environment (``api_key_env``, default ``OPENAI_API_KEY``) and kept
  in this process's memory only: it is never stored, logged or shown, and scrubbed from messages.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import UserError

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL_ENV = "OPENAI_BASE_URL"


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
    OpenAI's). Backoff before retry k (1, 2, ...): uniform(0, min(backoff_max_s, backoff_base_s * 2**(k-1))),
    and never less than the server's Retry-After."""

    model: str
    base_url: str | None = None
    api_key_env: str = DEFAULT_KEY_ENV
    concurrency: int = 8
    max_retries: int = 5
    timeout_s: float = 60.0
    max_tokens: int = 1024
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0

    def __post_init__(self):
        if not self.model.strip():
            raise UserError("an API judge needs a model name: --judge openai:MODEL")
        for name, lo in (("concurrency", 1), ("max_retries", 0), ("max_tokens", 1)):
            if int(getattr(self, name)) < lo:
                raise UserError(f"--{name.replace('_', '-')} must be >= {lo}, got {getattr(self, name)}")
        if not self.timeout_s > 0:
            raise UserError(f"--timeout must be > 0 seconds, got {self.timeout_s}")


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
        return {"requests": self.requests, "retries": self.retries, "failed": self.failed,
                "requests_per_s": self.requests / dt, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


def retry_after_s(headers: Any) -> float | None:
    """Seconds the server asks us to wait (``retry-after-ms``, ``Retry-After`` seconds or HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    try:
        if ms is not None:
            return max(float(ms) / 1000.0, 0.0)
    except ValueError:
        pass
    ra = headers.get("retry-after")
    if ra is None:
        return None
    try:
        return max(float(ra), 0.0)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(ra) if ra else None
        return max(parsed.timestamp() - time.time(), 0.0) if parsed is not None else None


def backoff_s(attempt: int, cfg: ApiJudgeConfig, rng: random.Random, server_wait: float | None) -> float:
    """Wait before retry ``attempt`` (1-based): full jitter on an exponential cap, at least Retry-After."""
    jittered = rng.uniform(0.0, min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (attempt - 1)))
    return max(jittered, server_wait or 0.0)


class ApiJudge:
    """An OpenAI-compatible judge. Call :meth:`preflight` first (one cheap request), then
    :meth:`run` over (key, messages) items."""

    def __init__(self, cfg: ApiJudgeConfig, *, seed: int = 0):
        import openai  # a runtime requirement; imported here so the judge module stays light

        self.cfg, self._openai = cfg, openai
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise UserError(f"the API key variable ${cfg.api_key_env} is not set; export it (the key is read "
                            "from the environment only) or name another with --api-key-env")
        self._key = key
        self.base_url = cfg.base_url or os.environ.get(DEFAULT_BASE_URL_ENV) or None
        self.stats = ApiStats()
        self._rng = random.Random(seed)

    def _client(self, async_: bool):
        kind = self._openai.AsyncOpenAI if async_ else self._openai.OpenAI
        return kind(api_key=self._key, base_url=self.base_url, max_retries=0, timeout=self.cfg.timeout_s)

    def scrub(self, text: str) -> str:
        """``text`` on one line, without the key (a server may echo what it received)."""
        return " ".join(str(text).replace(self._key, "***").split())[:500]

    def preflight(self) -> str:
        """List the server's models (one cheap request) and check the judge model is among them;
        a server without ``GET /models`` (404) gets one 1-token chat request instead.

        Raises UserError (one line) for an unreachable server, a refused key (401/403), or a model
        the server does not list. Returns the base URL used (for the summary).
        """
        o, where = self._openai, self.base_url or "the default OpenAI endpoint"
        try:
            with self._client(False) as client:
                try:
                    listed = [m.id for m in client.models.list()]
                except o.NotFoundError:  # a gateway without GET /models: one 1-token chat request instead
                    client.post("/chat/completions", cast_to=o.types.chat.ChatCompletion,
                                body={"model": self.cfg.model, "max_tokens": 1,
                                      "messages": [{"role": "user", "content": "Reply with OK."}]})
                    listed = [self.cfg.model]
        except o.NotFoundError as exc:
            raise UserError(f"the judge server at {where} does not serve model {self.cfg.model!r} (404): "
                            f"{self.scrub(_message(exc))}") from None
        except o.AuthenticationError as exc:
            raise UserError(f"the judge server at {where} refused the key in ${self.cfg.api_key_env} "
                            f"(401): {self.scrub(_message(exc))}") from None
        except o.PermissionDeniedError as exc:
            raise UserError(f"the judge server at {where} denied access (403): {self.scrub(_message(exc))}") from None
        except (o.APIConnectionError, o.APITimeoutError) as exc:
            raise UserError(f"cannot reach the judge server at {where}: {self.scrub(str(exc))}; check --base-url") from None
        except o.APIStatusError as exc:
            raise UserError(f"the judge server at {where} answered {exc.status_code} to GET /models: "
                            f"{self.scrub(_message(exc))}") from None
        if self.cfg.model not in listed:
            shown = ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else "")
            raise UserError(f"the judge server at {where} does not list model {self.cfg.model!r}; "
                            f"it serves: {shown or '(none)'}")
        return self.base_url or "default"

    async def _once(self, client, messages: list[dict]) -> Reply:
        # the client's documented low-level call for POST /chat/completions (same errors, same typed
        # ChatCompletion): ``chat.completions.create`` first walks the params through its TypedDict
        # transform, a quarter of the judge's CPU at 600 requests/s (bench/bench_judge.py)
        resp = await client.post("/chat/completions", cast_to=self._openai.types.chat.ChatCompletion,
                                 body={"model": self.cfg.model, "messages": messages, "temperature": 0.0,
                                       "max_tokens": self.cfg.max_tokens})
        usage = getattr(resp, "usage", None)
        pt = getattr(usage, "prompt_tokens", None) if usage is not None else None
        ct = getattr(usage, "completion_tokens", None) if usage is not None else None
        choices = getattr(resp, "choices", None) or []
        if not choices:
            return Reply(None, getattr(resp, "model", None), pt, ct, error="the server returned no choices")
        text = getattr(choices[0].message, "content", None)
        return Reply(text, getattr(resp, "model", None), pt, ct,
                     error=None if isinstance(text, str) else "the reply has no text content")

    async def complete(self, client, messages: list[dict]) -> Reply:
        """One judgement with retries; never raises for a request's failure (it is in ``error``)."""
        o, t0, attempt = self._openai, time.perf_counter(), 0
        while True:
            attempt += 1
            self.stats.requests += 1
            try:
                r = await self._once(client, messages)
                self.stats.prompt_tokens += r.prompt_tokens or 0
                self.stats.completion_tokens += r.completion_tokens or 0
                return Reply(r.text, r.model, r.prompt_tokens, r.completion_tokens,
                             time.perf_counter() - t0, attempt, r.error)
            except o.APIStatusError as exc:
                code = exc.status_code
                retryable = code == 429 or code >= 500 or code in (408, 409)
                err, wait = f"HTTP {code}: {self.scrub(_message(exc))}", retry_after_s(exc.response.headers)
            except (o.APITimeoutError, o.APIConnectionError) as exc:
                retryable, err, wait = True, f"{type(exc).__name__}: {self.scrub(str(exc))}", None
            except (o.APIResponseValidationError, ValueError) as exc:  # a malformed body (bad JSON)
                retryable, err, wait = True, f"malformed reply: {self.scrub(str(exc))}", None
            if not retryable or attempt > self.cfg.max_retries:
                self.stats.failed += 1
                return Reply(None, None, None, None, time.perf_counter() - t0, attempt, err)
            self.stats.retries += 1
            await asyncio.sleep(backoff_s(attempt, self.cfg, self._rng, wait))

    def run(self, items: Iterable[tuple[Any, list[dict]]], on_reply: Callable[[Any, Reply], None],
            flush: Callable[[], None] | None = None, flush_every_s: float = 0.25) -> None:
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
            tasks = [asyncio.create_task(produce())] + [asyncio.create_task(work(client)) for _ in range(n)]
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
