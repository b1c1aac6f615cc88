"""Serving layer: the server without HTTP. A checked request becomes keyed choices on a model's
worker, and its finished choices become stored rows of the served run.

One request, end to end (:meth:`Core.start` then :meth:`Call.result` or :meth:`Call.events`):

1. tokens    each prompt tokenized as the endpoint says (text: the tokenizer's default special
             tokens, as vLLM; token ids: as sent, checked against the vocabulary; chat: the model's
             chat template), its length + max_tokens checked against the context
2. key       prompt id (keys.Question or the pinned one), seed (the request's, else the server's;
             per model under --noise independent), repeats from the run's occurrence counters
3. generate  the choices go to the model's worker (engine.serving.worker); overload is a 429
4. store     the finished choices' rows go to the writer's journal before the answer (committed
             within ``commit_every_s``: engine.serving.writer). A request that fails or whose
             client goes away stores nothing and gives its repeats back
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engine import config
from engine.errors import UserError
from engine.generation.prompts import chat_text
from engine.generation.types import Unit
from engine.serving import keys
from engine.serving.protocol import ApiError, Request, bad
from engine.serving.seq import Seq
from engine.serving.worker import ModelWorker
from engine.serving.writer import Rows, StoreWriter
from engine.store.generations import GenerationRow, TraceRow
from engine.store.runs import PromptRow
from engine.store.served import ServedRow, close_served_run, open_served_run

RETRY_AFTER_S = 1  # what a 429 / 503 asks the client to wait


@dataclass(frozen=True)
class ServeConfig:
    """The server's settings (the API key is never part of it: see :class:`Core`)."""

    run_id: str
    db: str | os.PathLike = config.DEFAULT_DB
    seed: int = config.DEFAULT_SEED
    noise: str = "coupled"  # keys.NOISES
    traces: bool = False
    trace_top_k: int = config.DEFAULT_TRACE_TOP_K
    batch_size: int = config.DEFAULT_BATCH_SIZE
    max_queue: int = 256  # choices waiting per model beyond the running batch; more: 429
    commit_every_s: float = config.SERVE_COMMIT_EVERY_S  # the journal's commits (engine.serving.writer)
    command: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.noise not in keys.NOISES:
            raise UserError(f"unknown --noise {self.noise!r}; allowed: {', '.join(keys.NOISES)}")
        try:
            keys.check_seed(self.seed, "--seed")
        except keys.RequestKeyError as exc:
            raise UserError(str(exc)) from None
        for name in ("batch_size", "max_queue"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"--{name.replace('_', '-')} must be an integer >= 1, got {v!r}")
        c = self.commit_every_s
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c <= 3600:
            raise UserError(f"--commit-every must be seconds in [0, 3600], got {c!r}")
        if not self.run_id or not isinstance(self.run_id, str):
            raise UserError(f"--run must be a non-empty name, got {self.run_id!r}")


class Worker(Protocol):
    """What generates a model's choices (:class:`~engine.serving.worker.ModelWorker`: the transformers
    loop; another backend plugs in here through ``Core(make_worker=...)``). It fills each submitted
    :class:`Seq` (tokens, text, finish) and calls its ``on_done`` exactly once, from any thread."""

    vocab_size: int  # the logits' width (token ids of a prompt must be below it)
    outstanding: int  # choices submitted and not finished
    running: int  # choices in the batch now
    tokens: int  # tokens generated so far

    def submit(self, seqs: list[Seq]) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


@dataclass
class ServedModel:
    """A model the server answers for: its loaded model, worker and limits."""

    name: str
    lm: Any  # models.LoadedModel
    worker: Worker
    context: int | None  # None: unknown (not checked)


def _context(lm) -> int | None:
    if isinstance(getattr(lm, "max_model_len", None), int):  # a vLLM backend: its engine's limit
        return int(lm.max_model_len)
    cfg = getattr(lm.model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _key_mode(models: Sequence[Any]) -> tuple[str, list[str]]:
    vids = {lm.name: lm.vocab_id for lm in models}
    if len(set(vids.values())) == 1:
        return "token_id", []
    return "bytes", [
        "models do not share one vocabulary ("
        + ", ".join(f"{n}: {v}" for n, v in vids.items())
        + "); noise is keyed by token byte strings, so coupling only holds where the tokenizers "
        "produce the same strings (expect weaker coupling)"
    ]


def _backend(models: Sequence[Any]) -> str:
    """'vllm' for models loaded by engine.generation.vllm_backend, else 'hf'."""
    return "vllm" if any(getattr(lm, "name_of_backend", "") == "vllm" for lm in models) else "hf"


def _worker(lm, key_mode: str, batch_size: int) -> Worker:
    """The model's generation thread: the transformers loop's, or vLLM's (--backend vllm)."""
    if getattr(lm, "name_of_backend", "") == "vllm":
        from engine.serving.vllm_worker import VllmWorker

        return VllmWorker(lm.name, lm, key_mode, batch_size)
    return ModelWorker(lm.name, lm, key_mode, batch_size)


class Core:
    """The served run and its models. ``models``: loaded models (``models.LoadedModel``), named by
    their ``.name`` (the request's ``model`` field)."""

    def __init__(
        self,
        cfg: ServeConfig,
        models: Sequence[Any],
        code_version: str,
        host: str | None = None,
        make_worker: Callable[[Any, str, int], Worker] | None = None,
    ):
        """``make_worker(lm, key_mode, batch_size)``: the backend's worker of one model (default: the
        transformers loop's, :class:`~engine.serving.worker.ModelWorker`)."""
        from engine.store.runlock import RunLock

        if not models:
            raise UserError("serve needs at least one model (--models)")
        names = [lm.name for lm in models]
        if len(set(names)) != len(names):
            raise UserError(f"--models names a model twice: {names}")
        self.cfg, self.mode = cfg, cfg.noise
        self.backend = _backend(models)
        key_mode, warnings = _key_mode(models)
        self.key_mode = key_mode
        self._lock = RunLock(
            cfg.db,
            cfg.run_id,
            list(cfg.command) if cfg.command else None,
            busy=f"run {cfg.run_id} is already being served",
        )
        self._lock.__enter__()
        try:
            stored = open_served_run(
                cfg.db,
                cfg.run_id,
                self.run_config(names),
                key_mode,
                code_version,
                host or socket.gethostname(),
                warnings,
            )
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        self.occ = keys.Occurrences(stored)
        self.writer = StoreWriter(
            cfg.db, cfg.run_id, after_write=self._lock.beat, commit_every_s=cfg.commit_every_s
        )
        self.models = {
            lm.name: ServedModel(
                lm.name, lm, (make_worker or _worker)(lm, key_mode, cfg.batch_size), _context(lm)
            )
            for lm in models
        }
        self.requests = self.in_flight = self.failed = 0
        self.closing = False
        self.started_wall = time.time()

    def run_config(self, names: list[str]) -> dict[str, Any]:
        c = self.cfg
        return {
            "served": {"rule": keys.KEY_RULE, "noise": c.noise, "batch_size": c.batch_size},
            "models": names,
            "modes": [c.noise],
            "seed": c.seed,
            "backend": self.backend,
            "traces": c.traces,
            "trace_top_k": c.trace_top_k if c.traces else 0,
            "dataset": f"served:{c.run_id}",
            "command": list(c.command) if c.command else None,
        }

    # ---- requests
    def model(self, name: str) -> ServedModel:
        m = self.models.get(name)
        if m is None:
            raise ApiError(
                404,
                f"model {name!r} is not served here; served: {', '.join(self.models)}",
                param="model",
                code="model_not_found",
            )
        return m

    def start(self, req: Request) -> Call:
        """Steps 1-3 for a checked request: its choices are generating when this returns."""
        if self.closing:
            raise ApiError(
                503, "the server is shutting down", headers={"Retry-After": str(RETRY_AFTER_S)}
            )
        m = self.model(req.model)
        prompts = [_tokens(m, q, req) for q in req.questions]
        asked = len(prompts) * req.n
        if asked > self.cfg.max_queue:  # never fits: a 429 would be retried for ever
            raise bad(
                f"this request asks {asked} choices; the server takes at most {self.cfg.max_queue} "
                "at once (--max-queue)",
                "n",
            )
        waiting = max(0, m.worker.outstanding - m.worker.running)  # choices not in the batch yet
        if waiting + asked > self.cfg.max_queue:
            raise ApiError(
                429,
                f"server busy: {waiting} choices are waiting for model {m.name!r} (at most "
                f"{self.cfg.max_queue}); retry after {RETRY_AFTER_S} s",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        call = Call(self, m, req, prompts)
        try:
            m.worker.submit(call.seqs)
        except RuntimeError:  # the worker closed between the check above and now
            call.release()
            raise ApiError(
                503, "the server is shutting down", headers={"Retry-After": str(RETRY_AFTER_S)}
            ) from None
        self.requests += 1
        self.in_flight += 1
        return call

    def snapshot(self) -> dict[str, Any]:
        """The operator's figures: requests, in flight, failed, choices queued, tokens, stored."""
        ws = [m.worker for m in self.models.values()]
        return {
            "run": self.cfg.run_id,
            "requests": self.requests,
            "in_flight": self.in_flight,
            "failed": self.failed,
            "queued": sum(max(0, w.outstanding - w.running) for w in ws),
            "running": sum(w.running for w in ws),
            "tokens": sum(w.tokens for w in ws),
            "stored": self.writer.stored,
        }

    def close(self, status: str = "done") -> None:
        """Finish the workers' choices, write what is waiting, mark the run and release its lock."""
        self.closing = True
        for m in self.models.values():
            m.worker.close(timeout=60)
        self.writer.close(timeout=60)
        try:
            close_served_run(self.cfg.db, self.cfg.run_id, status)
        finally:
            self._lock.__exit__(None, None, None)


def _tokens(m: ServedModel, q: keys.Question, req: Request) -> list[int]:
    """Step 1: the prompt's token ids, checked against the vocabulary and the context."""
    tok = m.lm.tokenizer
    if q.endpoint == "chat":
        text = chat_text(tok, [{"role": r, "content": c} for r, c in q.messages()])
        ids = tok(text, add_special_tokens=False)["input_ids"]
    elif isinstance(q.content, str):
        ids = tok(q.content)["input_ids"]
    else:
        ids = list(q.content)
        V = m.worker.vocab_size
        out = [t for t in ids if t >= V]
        if out:
            raise bad(
                f"token id {out[0]} is outside model {m.name!r}'s vocabulary (ids 0 to {V - 1})",
                "prompt",
            )
    if not ids:
        raise bad("the prompt is empty (no tokens)", "prompt")
    if m.context is not None:
        want = req.max_tokens if req.max_tokens is not None else 1
        if len(ids) + want > m.context:
            raise bad(
                f"the prompt has {len(ids)} tokens and max_tokens is {want}: more than model {m.name!r}'s "
                f"context of {m.context} tokens",
                "messages" if q.endpoint == "chat" else "prompt",
            )
    return ids


def _shown(q: keys.Question, ids: list[int], tok) -> str:
    """A prompt as the run's prompts table shows it."""
    if q.endpoint == "chat":
        msgs = q.messages()
        if len(msgs) == 1 and msgs[0][0] == "user":
            return msgs[0][1]
        return "\n\n".join(f"[{r}] {c}" for r, c in msgs)
    return q.content if isinstance(q.content, str) else tok.decode(ids)


def _sent(q: keys.Question) -> dict[str, Any]:
    """The question as stored in ``served.request``."""
    if q.endpoint == "chat":
        return {"messages": [{"role": r, "content": c} for r, c in q.messages()], **_fields(q)}
    return {"prompt": q.content if isinstance(q.content, str) else list(q.content), **_fields(q)}


def _fields(q: keys.Question) -> dict[str, Any]:
    return {"temperature": q.temperature, "top_p": q.top_p, "top_k": q.top_k}


class Call:
    """One request in flight: its choices (``seqs``, in choice-index order) and their keys."""

    def __init__(self, core: Core, m: ServedModel, req: Request, prompts: list[list[int]]):
        self.core, self.m, self.req, self.prompts = core, m, req, prompts
        self.id = ("chatcmpl-" if req.endpoint == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created, self.t0 = int(time.time()), time.perf_counter()
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()  # (choice index, text delta, token index) or None
        self._left = len(req.questions) * req.n
        self._all_done = self.loop.create_future()
        self.taken: list[tuple[keys.Slot, tuple[int, ...]]] = []  # given back if nothing is stored
        self.seqs: list[Seq] = []
        self.index: dict[int, int] = {}  # id(seq) -> its choice index
        self.stored = self._final = False
        seed = keys.model_seed(req.seed if req.seed is not None else core.cfg.seed, m.name, core.mode)
        try:
            for q, ids in zip(req.questions, prompts):
                self._add(q, ids, seed)
        except keys.SeedConflict as exc:
            self.release()
            raise ApiError(409, str(exc), param="seed") from None

    def _add(self, q: keys.Question, ids: list[int], seed: int) -> None:
        """Step 2: this prompt's n choices, keyed."""
        req, core = self.req, self.core
        pid = req.pin.prompt_id if req.pin else q.prompt_id
        slot = (self.m.name, core.mode, pid)
        if req.max_tokens == 0:  # echo only: no sample, no repeat taken, nothing stored
            repeats: tuple[int, ...] = tuple(range(req.n))
        elif req.pin is not None and req.pin.repeat is not None:
            repeats = tuple(range(req.pin.repeat, req.pin.repeat + req.n))
            self.taken.append((slot, core.occ.pin(slot, seed, repeats)))
        else:
            repeats = core.occ.take(slot, seed, req.n)
            self.taken.append((slot, repeats))
        context = self.m.context
        max_tokens = (
            req.max_tokens if req.max_tokens is not None else (context - len(ids) if context else 4096)
        )
        for r in repeats:
            unit = Unit(pid, r, seed)
            self.index[id(unit)] = len(self.seqs)
            self.seqs.append(
                Seq(
                    unit=unit,
                    prompt=ids,
                    temperature=q.temperature,
                    top_k=q.top_k,
                    top_p=q.top_p,
                    max_tokens=max_tokens,
                    on_done=self._on_done,
                    stop=req.stop,
                    logprobs=req.logprobs,
                    trace_k=core.cfg.trace_top_k if core.cfg.traces else 0,
                    echo=req.echo,
                    on_token=self._on_token if req.stream else None,
                )
            )

    # ---- worker thread -> event loop
    def _on_done(self, s: Seq) -> None:
        self.loop.call_soon_threadsafe(self._one_done)

    def _one_done(self) -> None:
        self._left -= 1
        if self._left == 0 and not self._all_done.done():
            self._all_done.set_result(None)

    def _on_token(self, s: Seq, delta: str) -> None:
        i = len(s.ids) - 1
        lp = (s.token_logprobs[i], s.top_logprobs[i]) if s.logprobs is not None else None
        self.loop.call_soon_threadsafe(
            self.queue.put_nowait, (self.index[id(s.unit)], delta, s.ids[i], lp)
        )

    # ---- the end
    def cancel(self) -> None:
        """The client went away: the choices end at the worker's next step; nothing is stored."""
        for s in self.seqs:
            s.cancelled = True

    def release(self) -> None:
        """Give the request's repeats back (nothing of it was stored)."""
        for slot, repeats in self.taken:
            self.core.occ.release(slot, repeats)
        self.taken = []

    async def wait(self) -> None:
        """Wait for every choice, then store them (step 4); ApiError when one failed or the store
        refused them."""
        try:
            await self._all_done
            failed = [s for s in self.seqs if s.finish in ("error", "cancelled")]
            if failed:
                err = next((s.error for s in failed if s.error is not None), None)
                if err is None:  # cancelled: the client went away
                    raise asyncio.CancelledError()
                raise ApiError(500, f"generation failed: {type(err).__name__}: {err}")
            if self.req.max_tokens != 0:
                try:
                    self.core.writer.submit(self.rows())  # journaled: its repeats stay taken
                except Exception as exc:
                    raise ApiError(500, f"the completion could not be stored: {exc}") from exc
            self.stored = True
        finally:
            self.abandon()

    def abandon(self) -> None:
        """The request's end, once: a request that stored nothing stops its choices and gives its
        repeats back."""
        if self._final:
            return
        self._final = True
        self.core.in_flight -= 1
        if not self.stored:
            self.cancel()
            self.release()
            self.core.failed += 1

    def rows(self) -> Rows:
        """What this request stores: its new prompts, and per choice a generation, its served row and
        (with --traces) its token trace."""
        core, m, req = self.core, self.m, self.req
        run, mode, tok = core.cfg.run_id, core.mode, m.lm.tokenizer
        latency = time.perf_counter() - self.t0
        out = Rows()
        for qi, (q, ids) in enumerate(zip(req.questions, self.prompts)):
            pid = self.seqs[qi * req.n].unit.prompt_id
            shown = _shown(q, ids, tok)
            out.prompts.append(PromptRow("", pid, -1, q.endpoint, shown, None, None, shown))
            sent = json.dumps({**_sent(q), **req.fields()})
            for j in range(req.n):
                i = qi * req.n + j
                s = self.seqs[i]
                u = s.unit
                out.generations.append(
                    GenerationRow(
                        run,
                        m.name,
                        u.prompt_id,
                        u.repeat,
                        mode,
                        u.seed,
                        s.text,
                        list(s.ids),
                        s.finish,
                        len(s.ids),
                    )
                )
                out.served.append(
                    ServedRow(
                        run,
                        m.name,
                        u.prompt_id,
                        u.repeat,
                        mode,
                        self.id,
                        i,
                        q.endpoint,
                        req.pin is not None,
                        sent,
                        len(ids),
                        list(s.probs),
                        list(s.token_logprobs) if s.logprobs is not None else [],
                        latency,
                    )
                )
                if core.cfg.traces:
                    out.traces += _trace_rows(run, m.name, mode, s, tok)
        return out

    async def events(self) -> AsyncIterator[tuple[int, str, int, Any]]:
        """Streaming: (choice index, text delta, token id, (logprob, top) or None) per generated token,
        until every choice has finished."""
        waiter = asyncio.ensure_future(self._all_done)
        while True:
            if self.queue.empty() and waiter.done():
                return
            getter = asyncio.ensure_future(self.queue.get())
            done, _ = await asyncio.wait({getter, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield getter.result()
            else:
                getter.cancel()


def _trace_rows(run: str, model: str, mode: str, s: Seq, tok) -> list[TraceRow]:
    pieces = tok.convert_ids_to_tokens(list(s.ids))
    u = s.unit
    return [
        TraceRow(
            run,
            model,
            u.prompt_id,
            u.repeat,
            mode,
            step,
            t,
            pieces[step],
            s.probs[step],
            s.top_ids[step] if s.top_ids else None,
            s.top_probs[step] if s.top_probs else None,
            s.top_gumbels[step] if s.top_gumbels else None,
        )
        for step, t in enumerate(s.ids)
    ]
