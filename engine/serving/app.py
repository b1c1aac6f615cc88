"""Serving layer: the HTTP side (Starlette routes on uvicorn): authentication, JSON in and out,
server-sent events, OpenAI-style errors; the models load while the port already answers (503).

Routes: ``GET /v1/models`` (200 once every model is loaded), ``POST /v1/completions``,
``POST /v1/chat/completions`` (``stream: true``: server-sent events), ``GET /health``. Every
refusal is ``{"error": {"message", "type", "param", "code"}}`` with its status code, and the server
stays up.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.serving import responses
from engine.serving.core import RETRY_AFTER_S, Call, Core
from engine.serving.protocol import ApiError, bad, parse

BODY_MAX = 32 * 1024 * 1024  # bytes of one request body


@dataclass
class State:
    """What the routes read: the core once loaded (None before), the load error, the API key."""

    api_key: str | None = field(default=None, repr=False)  # never printed
    core: Core | None = None
    error: str | None = None
    loading: str = "loading models"


def _error(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def _check_auth(request: HttpRequest, state: State) -> None:
    if state.api_key is None:
        return
    got = request.headers.get("authorization", "")
    scheme, _, token = got.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), state.api_key.encode()
    ):
        raise ApiError(
            401, "missing or wrong API key: send Authorization: Bearer <key>", code="invalid_api_key"
        )


def _ready(state: State) -> Core:
    if state.core is None:
        msg = state.error or state.loading
        raise ApiError(503, f"not ready: {msg}", headers={"Retry-After": str(RETRY_AFTER_S * 5)})
    return state.core


async def _json_body(request: HttpRequest) -> Any:
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > BODY_MAX:
        raise ApiError(413, f"the request body is {int(size)} bytes; at most {BODY_MAX}")
    raw = await request.body()
    if len(raw) > BODY_MAX:
        raise ApiError(413, f"the request body is {len(raw)} bytes; at most {BODY_MAX}")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"the request body is not valid JSON: {exc}") from None


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def _stream(call: Call) -> AsyncIterator[str]:
    """Server-sent events: a chunk per generated token (text that can no longer change), a finish
    chunk per choice once the request is stored, the usage when asked, then [DONE]."""
    try:
        if call.req.endpoint == "chat":
            yield _sse(
                responses.chunk(
                    call,
                    [
                        {
                            "index": i,
                            "delta": {"role": "assistant", "content": ""},
                            "finish_reason": None,
                        }
                        for i in range(len(call.seqs))
                    ],
                )
            )
        async for i, delta, token, lp in call.events():
            if delta or lp is not None:
                yield _sse(responses.chunk(call, [responses.token_choice(call, i, delta, token, lp)]))
        await call.wait()
        for i in range(len(call.seqs)):
            yield _sse(responses.chunk(call, [responses.finish_choice(call, i)]))
        if call.req.include_usage:
            yield _sse(responses.chunk(call, [], usage=responses.usage(call)))
        yield "data: [DONE]\n\n"
    except ApiError as e:
        yield _sse(e.body())
        yield "data: [DONE]\n\n"
    finally:
        call.abandon()  # a client that went away: its choices stop, nothing is stored


def _endpoint(state: State, endpoint: str) -> Callable:
    body_of = responses.chat_body if endpoint == "chat" else responses.completion_body

    async def handle(request: HttpRequest) -> Response:
        _check_auth(request, state)
        core = _ready(state)
        req = parse(await _json_body(request), endpoint)
        call = core.start(req)
        if req.stream:
            return StreamingResponse(_stream(call), media_type="text/event-stream")
        try:
            await call.wait()
        finally:
            call.abandon()
        return JSONResponse(body_of(call))

    return handle


def build_app(state: State, lifespan=None) -> Starlette:
    async def models(request: HttpRequest) -> Response:
        _check_auth(request, state)
        core = _ready(state)
        data = [
            {
                "id": m.name,
                "object": "model",
                "created": int(core.started_wall),
                "owned_by": "coupled-eval",
                "max_model_len": m.context,
            }
            for m in core.models.values()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: HttpRequest) -> Response:
        if state.core is not None:
            return JSONResponse({"status": "ok", "run": state.core.cfg.run_id})
        return JSONResponse(
            {"status": "error" if state.error else "loading", "message": state.error or state.loading},
            status_code=503,
        )

    async def on_api_error(request: HttpRequest, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error(exc)

    async def on_http_error(request: HttpRequest, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        msg = (
            f"no route {request.method} {request.url.path}; routes: GET /v1/models, "
            "POST /v1/completions, POST /v1/chat/completions, GET /health"
        )
        return _error(
            ApiError(exc.status_code, msg if exc.status_code in (404, 405) else str(exc.detail))
        )

    async def on_error(request: HttpRequest, exc: Exception) -> Response:
        traceback.print_exception(exc, file=sys.stderr)
        return _error(ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/completions", _endpoint(state, "completions"), methods=["POST"]),
            Route("/v1/chat/completions", _endpoint(state, "chat"), methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={ApiError: on_api_error, HTTPException: on_http_error, Exception: on_error},
        lifespan=lifespan,
    )


async def progress_loop(state: State, every_s: float, write: Callable[[dict], None]) -> None:
    """The operator's progress line (requests, tokens/s, queue), every ``every_s`` seconds while
    something changes; ``write`` gets the same figures as a dict."""
    last: tuple | None = None
    prev_tokens, prev_t = 0, asyncio.get_running_loop().time()
    while True:
        await asyncio.sleep(every_s)
        core = state.core
        if core is None:
            continue
        now = asyncio.get_running_loop().time()
        snap = core.snapshot()
        rate = (snap["tokens"] - prev_tokens) / max(now - prev_t, 1e-9)
        prev_tokens, prev_t = snap["tokens"], now
        snap["tokens_per_s"] = round(rate, 1)
        key = (snap["requests"], snap["in_flight"], snap["queued"], snap["stored"])
        write(snap)
        if key != last:
            last = key
            print(
                f"[serve {snap['run']}] {snap['requests']:,} requests ({snap['in_flight']} in flight, "
                f"{snap['failed']} failed) | queue {snap['queued']} | {rate:,.1f} tokens/s | "
                f"{snap['stored']:,} generations stored",
                file=sys.stderr,
                flush=True,
            )
