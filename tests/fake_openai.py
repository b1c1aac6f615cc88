"""A fake OpenAI-compatible server on 127.0.0.1 for judge tests and bench/bench_judge.py.

Starlette + uvicorn in a background thread (both pinned: requirements-dev.txt). It answers
``GET /v1/models`` and ``POST /v1/chat/completions``, checks the bearer key (401 otherwise), counts
every request (a key revoked mid-run: :meth:`FakeOpenAI.revoke_key`), and follows a script: ``script(body, n) -> Action`` where ``n`` counts the requests
already made with the same messages (0 on the first), so "fail twice, then answer" is easy to say.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass(frozen=True)
class Action:
    """What the server does with one chat request. kind: 'ok' (reply ``text``), 'status' (HTTP
    ``status`` with an error body; ``retry_after`` as the Retry-After header when given: a number of
    seconds, or a string sent as is: an HTTP date, "5s", garbage), 'hang'
    (sleep ``delay_s`` before answering 'ok': a client timeout), 'malformed' (a 200 with broken
    JSON), 'empty' (a 200 with no choices)."""

    kind: str = "ok"
    text: str = "A"
    status: int = 500
    retry_after: float | str | None = None
    delay_s: float = 0.0


def messages_key(body: dict) -> str:
    return hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()


class FakeOpenAI:
    """The server; use as a context manager. ``url`` is the base URL (``.../v1``)."""

    def __init__(
        self,
        *,
        key: str = "sk-test-key",
        models: tuple[str, ...] = ("judge-1",),
        script: Callable[[dict, int], Action] | None = None,
        latency_s: float = 0.0,
        reported_model: str | None = None,
        list_models: bool = True,
    ):
        self.key, self.models, self.latency_s, self.list_models = key, models, latency_s, list_models
        self.script = script or (lambda body, n: Action())
        self.reported_model = reported_model
        self.n_chat = self.n_models = 0
        self.inflight = self.max_inflight = 0
        self.times: dict[str, list[float]] = {}  # arrival times per messages key
        self.per_messages: Counter = Counter()
        self.lock = threading.Lock()
        app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(
            uvicorn.Config(
                app, log_level="error", access_log=False, timeout_graceful_shutdown=1, backlog=512
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        deadline = time.time() + 20
        while not self._server.started:
            if time.time() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def revoke_key(self) -> None:
        """From now on the key is refused (401 on every request): a key revoked mid-run."""
        self.key = "revoked-" + self.key

    def _authorised(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.key}"

    @staticmethod
    def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": message, "type": "fake", "code": status}},
            status_code=status,
            headers=headers,
        )

    async def _models(self, request: Request) -> Response:
        with self.lock:
            self.n_models += 1
        if not self.list_models:
            return self._error(404, "Not Found")
        if not self._authorised(request):
            return self._error(401, "Incorrect API key provided")
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models],
            }
        )

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        k = messages_key(body)
        with self.lock:
            self.n_chat += 1
            n = self.per_messages[k]
            self.per_messages[k] += 1
            self.times.setdefault(k, []).append(time.monotonic())
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            return await self._answer(request, body, n)
        finally:
            with self.lock:
                self.inflight -= 1

    async def _answer(self, request: Request, body: dict, n: int) -> Response:
        if not self._authorised(request):
            return self._error(401, "Incorrect API key provided")
        if body.get("model") not in self.models:
            return self._error(404, f"The model {body.get('model')!r} does not exist")
        act = self.script(body, n)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if act.kind == "status":
            ra = act.retry_after
            headers = None if ra is None else {"retry-after": ra if isinstance(ra, str) else f"{ra:g}"}
            return self._error(act.status, f"scripted {act.status}", headers)
        if act.kind == "hang":
            await asyncio.sleep(act.delay_s)
        if act.kind == "malformed":
            return Response('{"id": "x", "choices": [', media_type="application/json")
        choices = (
            []
            if act.kind == "empty"
            else [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": act.text},
                    "finish_reason": "stop",
                }
            ]
        )
        content = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        return JSONResponse(
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.reported_model or f"{body.get('model')}-2026-01-01",
                "choices": choices,
                "usage": {
                    "prompt_tokens": content // 4,
                    "completion_tokens": len(act.text.split()),
                    "total_tokens": content // 4 + len(act.text.split()),
                },
            }
        )


def verdict_by_rank(body: dict) -> str:
    """The verdict a judge preferring the model named first in ``m1 < m2 < m3`` gives (tests' runs
    store 'answer of mK ...' texts): 'A' when the answer shown first is the better one."""
    import re

    user = body["messages"][-1]["content"]
    first = re.search(r"Assistant A's Answer\|>\nanswer of (m\d)", user)
    second = re.search(r"Assistant B's Answer\|>\nanswer of (m\d)", user)
    if not first or not second:
        return "Tie"
    return "A" if first.group(1) < second.group(1) else "B"


class FakeOpenAIProcess:
    """:class:`FakeOpenAI` in a forked process (its own interpreter and GIL: a benchmark then times
    the client alone, as with a remote server). ``n_chat`` and ``max_inflight`` are read at exit."""

    def __init__(self, **kwargs):
        import multiprocessing as mp

        self._ctx = mp.get_context("fork")
        self._parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=self._serve, args=(child, kwargs), daemon=True)
        self.url, self.n_chat, self.max_inflight = "", 0, 0

    @staticmethod
    def _serve(conn, kwargs) -> None:
        with FakeOpenAI(**kwargs) as srv:
            conn.send(srv.url)
            conn.recv()  # stop
            conn.send((srv.n_chat, srv.max_inflight))

    def __enter__(self) -> FakeOpenAIProcess:
        self._proc.start()
        if not self._parent.poll(30):
            raise RuntimeError("the fake OpenAI server process did not start")
        self.url = self._parent.recv()
        return self

    def __exit__(self, *exc) -> None:
        self._parent.send("stop")
        if self._parent.poll(30):
            self.n_chat, self.max_inflight = self._parent.recv()
        self._proc.join(timeout=15)
