"""Serving layer: running the server. :func:`serve` (the CLI's: binds, loads the models while the port
answers 503, serves until SIGINT / SIGTERM, then finishes or cancels what is in flight and flushes
the store) and :class:`ServerThread` (the same server in a background thread, on loaded models:
tests and bench/).

Shutdown: uvicorn stops accepting, waits up to ``shutdown_timeout_s`` for the requests in flight
(a request cancelled then stores nothing and gives its repeats back), then the lifespan's end closes
the workers, writes what is waiting and marks the run 'done'. A second Ctrl-C forces the exit; a
kill -9 leaves every answered completion stored (the writer commits before a response is sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from engine.errors import UserError
from engine.progress import write_json_atomic
from engine.serving.app import State, build_app, progress_loop
from engine.serving.core import Core, ServeConfig

# --backend; vllm: engine.serving.vllm_worker on engine.generation.vllm_backend
BACKENDS = ("hf", "vllm")
SHUTDOWN_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 10.0


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or one line naming the address when it cannot be had.

    Why ``IPPROTO_TCP`` spelled out: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on a
    socket whose ``proto`` says TCP, and an accepted connection inherits the listener's ``proto``.
    With the default 0, uvicorn's two writes of a response (headers, then body) met the client's
    delayed ACK: every non-streamed answer waited ~40 ms for nothing (bench/bench_serve.py)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = (
            "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror or exc})"
        )
        raise UserError(f"address {host}:{port} {why}; pass another --port or --host") from None
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, except that a signal that stopped it gracefully is not raised again
    afterwards (the command then exits 0, its run stored and closed)."""

    @contextlib.contextmanager
    def capture_signals(self):
        with super().capture_signals():
            yield
            self._captured_signals.clear()


def _lifespan(
    state: State,
    load: Callable[[], Core],
    server: list,
    progress: Callable[[dict], None],
    every_s: float,
):
    @contextlib.asynccontextmanager
    async def lifespan(app):
        loop = asyncio.get_running_loop()

        def _load() -> None:
            try:
                state.core = load()
            except BaseException as exc:  # a UserError (unknown model, run held), or worse
                state.error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
                if server:
                    server[0].should_exit = True

        loading = loop.run_in_executor(None, _load)
        ticker = asyncio.create_task(progress_loop(state, every_s, progress))
        try:
            yield
        finally:
            ticker.cancel()
            await loading
            if state.core is not None:
                await loop.run_in_executor(None, state.core.close)

    return lifespan


def _server(
    state: State,
    load: Callable[[], Core],
    progress: Callable[[dict], None],
    every_s: float,
    timeout_s: float,
) -> _Server:
    holder: list = []
    app = build_app(state, _lifespan(state, load, holder, progress, every_s))
    server = _Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=int(max(1, timeout_s)),
            lifespan="on",
            backlog=2048,
        )
    )
    holder.append(server)
    return server


def load_models(
    refs: Sequence[str], state: State, device: str | None, dtype: str | None, backend: str = "hf"
) -> list[Any]:
    """Each model loaded in turn (the port answers 503 'loading model i/n' meanwhile); ``backend``
    vllm: a vLLM engine per model (engine.generation.vllm_backend.VllmBackend)."""
    from engine import models

    out: list[Any] = []
    for i, ref in enumerate(refs, 1):
        state.loading = f"loading model {i}/{len(refs)} ({ref})"
        if backend == "vllm":
            from engine.generation.vllm_backend import VllmBackend

            out.append(VllmBackend(ref, dtype=dtype))
        else:
            lm = models.load_model(ref, device=device, dtype=dtype)
            lm.name = ref  # requests name a model as --models did (as generate names it in its runs)
            out.append(lm)
    return out


def serve(
    cfg: ServeConfig,
    model_refs: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    backend: str = "hf",
    device: str | None = None,
    dtype: str | None = None,
    progress_file: str | os.PathLike | None = None,
    progress_every_s: float = PROGRESS_EVERY_S,
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
    on_ready: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Serve ``model_refs`` until a signal stops the server; returns the last figures (requests,
    tokens, stored). UserError (one line) for a bad model, a held run, a busy port."""
    from engine.generation.run import code_version
    from engine.models.refs import resolve

    if backend not in BACKENDS:
        raise UserError(f"unknown --backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if backend == "vllm":
        from engine.generation.vllm_checks import require_vllm

        require_vllm()  # one line when vLLM is missing or unsupported, before the port is bound
    for ref in model_refs:
        resolve(ref)  # an unknown name is one line now, not after minutes of loading
    sock = bind(host, port)
    url = f"http://{host}:{sock.getsockname()[1]}/v1"
    state = State(api_key=api_key)
    started = time.time()

    def progress(snap: dict) -> None:
        if progress_file is not None:
            write_json_atomic(
                progress_file,
                {
                    **snap,
                    "kind": "serve",
                    "job": cfg.run_id,
                    "status": "running",
                    "address": url,
                    "pid": os.getpid(),
                    "started_at": started,
                    "updated_at": time.time(),
                },
            )

    def load() -> Core:
        core = Core(cfg, load_models(model_refs, state, device, dtype, backend), code_version())
        if on_ready is not None:
            on_ready(url)
        return core

    server = _server(state, load, progress, progress_every_s, shutdown_timeout_s)
    server.run(sockets=[sock])
    if state.error:
        raise UserError(state.error)
    snap = state.core.snapshot() if state.core is not None else {}
    if progress_file is not None and snap:
        write_json_atomic(
            progress_file,
            {
                **snap,
                "kind": "serve",
                "job": cfg.run_id,
                "status": "done",
                "address": url,
                "pid": os.getpid(),
                "updated_at": time.time(),
            },
        )
    return {"address": url, **snap}


class ServerThread:
    """The server on already loaded models, in a background thread (tests, bench/); a context
    manager whose ``url`` is the base URL (``.../v1``)."""

    def __init__(
        self,
        cfg: ServeConfig,
        models: Sequence[Any],
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        shutdown_timeout_s: float = 5.0,
    ):
        from engine.generation.run import code_version

        self.state = State(api_key=api_key)
        self.sock = bind(host, port)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}/v1"
        self.server = _server(
            self.state,
            lambda: Core(cfg, models, code_version()),
            lambda snap: None,
            3600.0,
            shutdown_timeout_s,
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def core(self) -> Core:
        assert self.state.core is not None
        return self.state.core

    def __enter__(self) -> ServerThread:
        self.thread.start()
        end = time.monotonic() + 60
        while self.state.core is None and self.state.error is None and time.monotonic() < end:
            time.sleep(0.01)
        while not self.server.started and self.state.error is None and time.monotonic() < end:
            time.sleep(0.01)
        if self.state.error is not None:
            self.__exit__()
            raise UserError(self.state.error)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(60)
