"""Serving layer: one model's worker thread on the vLLM backend (``engine serve --backend vllm``), the
same interface as :class:`engine.serving.worker.ModelWorker` (choices in, :class:`~engine.serving.seq.Seq`
filled, ``on_done``), so the HTTP layer, the key rule, the occurrence counters and the store are the
ones of the transformers backend.

Why this and not ``vllm serve --logits-processors ...``: the key rule (docs/METHODS.md 1.6) reads the
request as the client sent it, before any chat template (messages, or the prompt text), and the
occurrence counters live in the served run of the store, so a restarted server continues them. A
logits processor inside ``vllm serve`` sees only the templated prompt's token ids of one request at a
time and holds no store: it could key the noise by the templated tokens (two models with different
chat templates would then never share a key) and count repeats only in memory. Here vLLM is the
engine: every choice is one vLLM request, greedy (temperature 0), carrying its key (seed, unit =
noise.unit_key(prompt id, repeat)) and sampler settings in ``extra_args``; the project's keyed-Gumbel
logits processor (:mod:`engine.generation.vllm_processor`) draws its token with the transformers
loop's own sampler and noise and makes it the argmax. So a served choice's tokens equal the
transformers backend's where the two backends' logits agree (tests/vllm/test_vllm_serve.py).

The loop, per engine step: 1. intake (new choices become vLLM requests; a client that went away aborts
its request); 2. step (vLLM decodes every running request one token); 3. each new token goes through
the choice's text tracker (stop strings end it: the request is aborted; streamed deltas); 4. a finished
choice gets its per-step probabilities (and trace) from the processor's records, its model
log-probabilities from vLLM (raw logits, temperature 1: what the transformers worker reports) and
calls ``on_done``.
"""

from __future__ import annotations

import threading
from typing import Any

from engine.generation.vllm_backend import VllmBackend
from engine.generation.vllm_sampler import EXTRA_KEY, check_sampling_params
from engine.generation.vllm_traces import TRACES, FinishedRequests, StepTrace, flush_pending
from engine.sampling import noise
from engine.serving.inbox import WorkerThread
from engine.serving.seq import Seq, TextTracker

# One engine steps at a time in this process: vLLM keeps per-process state while it runs a step (its
# forward context), and the logits processor's step records (vllm_traces.PENDING / TRACES) are module
# globals that a step appends to and a reader drains. Two models' workers therefore take turns, step by
# step (on one CPU they would compete for the same cores anyway).
ENGINE_LOCK = threading.RLock()


class VllmWorker(WorkerThread):
    """One model's generation thread on a :class:`VllmBackend`. :meth:`submit` hands it choices from
    any thread; each ends with its ``on_done`` called in this thread (finish set, or ``error``)."""

    def __init__(self, name: str, backend: VllmBackend, key_mode: str, batch_size: int):
        self.name, self.backend, self.batch_size = name, backend, batch_size
        self.lm = backend  # what the request side reads: tokenizer, vocab_size
        self.vocab_size = backend.vocab_size
        keys = noise.token_keys_for(
            backend.tokenizer, "bytes" if key_mode == "bytes" else "token_id", vocab_size=self.vocab_size
        )
        self._call, self._kid, self._route = backend.register_keys(keys)
        self.stop_ids = set(backend.stop_ids)
        self.special = self.stop_ids | set(getattr(backend.tokenizer, "all_special_ids", []) or [])
        self._n = 0
        self._start(f"serve-vllm-{name}")  # self.running: requests inside vLLM

    def close(self, timeout: float | None = None) -> None:
        """Finish what was submitted, then end the thread and the engine's keys."""
        super().close(timeout)
        self.backend.end_call(self._call, self._kid, {})

    # ---- the worker thread
    def _run(self) -> None:
        inflight: dict[str, Seq] = {}
        while True:
            with self._cv:
                while not self._inbox and not inflight and not self._closing:
                    self._cv.wait()
                if not self._inbox and not inflight and self._closing:
                    return
            try:
                self._session(inflight)
            except Exception as exc:  # the engine failed: every choice in it gets the error
                for tag, s in list(inflight.items()) + [("", s) for s in self._take()]:
                    if tag:
                        self.backend.abort(tag)
                    if not s.finish:
                        s.error, s.finish = exc, "error"
                        self._done(s)
                inflight.clear()
            finally:
                self.running = len(inflight)

    def _params(self, s: Seq, tag: str):
        from vllm import SamplingParams

        p, r, seed = s.unit
        sp = SamplingParams(
            n=1,
            temperature=0.0,
            # vLLM generates at least one token: an echo-only choice (max_tokens 0) drops it
            max_tokens=max(int(s.max_tokens), 1),
            stop_token_ids=sorted(self.stop_ids),
            detokenize=False,
            skip_special_tokens=True,
            logprobs=s.logprobs,
            prompt_logprobs=(s.logprobs or 0) if s.echo else None,
            extra_args={
                EXTRA_KEY: {
                    "tag": tag,
                    "seed": noise.as_int64(int(seed)),
                    "unit": noise.unit_key(str(p), int(r)),
                    "temperature": float(s.temperature),
                    "top_k": int(s.top_k),
                    "top_p": float(s.top_p),
                    "trace_k": int(s.trace_k),
                    **self._route,
                }
            },
        )
        check_sampling_params(sp)
        return sp

    def _intake(self, inflight: dict[str, Seq], alias: dict[str, str]) -> None:
        """1. New choices become vLLM requests."""
        for s in self._take():
            if s.cancelled:
                self._finish(s, "cancelled")
                continue
            s.tracker = TextTracker(self.backend.tokenizer, s.stop, self.special)
            tag = f"{self.backend.tag}:{self._call}:{self._n}"
            self._n += 1
            rid = self.backend.add_request(tag, s.prompt, self._params(s, tag))
            alias[rid], inflight[tag] = tag, s

    def _session(self, inflight: dict[str, Seq]) -> None:
        """Step vLLM until no choice is pending or running."""
        alias: dict[str, str] = {}  # vLLM's request id (it may append a suffix) -> tag
        done = FinishedRequests(self.backend.sink if self.backend.remote_records else None)
        while True:
            with ENGINE_LOCK:
                if not self._iteration(inflight, alias, done):
                    return

    def _iteration(
        self, inflight: dict[str, Seq], alias: dict[str, str], done: FinishedRequests
    ) -> bool:
        """One pass of the loop (under ENGINE_LOCK); False when nothing is left to do."""
        self._intake(inflight, alias)
        for tag, s in list(inflight.items()):  # 1b. clients that went away
            if s.cancelled and tag not in done.waiting:
                self._drop(tag, inflight)
                self._finish(s, "cancelled")
        self.running = len(inflight)
        if not inflight:
            return False
        running = len(inflight) > len(done)
        for out in self.backend.step() if running else []:  # 2. one decode step
            tag = alias.get(out.request_id, out.request_id)
            seq = inflight.get(tag)
            if seq is None or tag in done.waiting:
                continue
            if self._advance(seq, out):  # 3. a stop string: the choice ends here
                self.backend.abort(tag)
                done.add(tag, seq, list(seq.ids))
            elif out.finished:
                done.add(tag, seq, list(out.outputs[0].token_ids))
        for tag, s, tokens, recs in done.ready(block=not running, check=self.backend.check_alive):
            del inflight[tag]
            self._complete(s, tokens, recs)  # 4.
        return True

    def _advance(self, s: Seq, out: Any) -> bool:
        """Take the request's new tokens (and their model log-probabilities); True when a stop string
        ends the choice (the tokens after it are not kept)."""
        c = out.outputs[0]
        if s.echo and s.prompt_logprobs is None and out.prompt_logprobs is not None:
            s.prompt_logprobs, s.prompt_top = _prompt_logprobs(
                s.prompt, out.prompt_logprobs, s.logprobs or 0
            )
        if s.max_tokens == 0:
            return False
        new = list(c.token_ids)[len(s.ids) :]
        for i, t in enumerate(new, start=len(s.ids)):
            s.ids.append(int(t))
            if s.logprobs is not None and c.logprobs is not None and i < len(c.logprobs):
                lp, alts = _token_logprobs(int(t), c.logprobs[i], s.logprobs)
                s.token_logprobs.append(lp)
                s.top_logprobs.append(alts)
            stopped = s.tracker.push(int(t))
            if s.on_token is not None:
                delta = s.tracker.delta(final=False)
                if delta:
                    s.on_token(s, delta)
            if stopped:
                s.finish = "stop"
                return True
        return False

    def _complete(self, s: Seq, tokens: list[int], recs: list[StepTrace]) -> None:
        if s.max_tokens == 0:  # echo only: the one token vLLM had to generate is not an answer
            s.ids, s.token_logprobs, s.top_logprobs = [], [], []
            self._finish(s, "length")
            return
        s.ids = list(tokens[: len(s.ids)] if s.finish == "stop" else tokens)
        s.probs = [float(r.prob) for r in recs[: len(s.ids)]]
        if s.trace_k:
            s.top_ids = [list(r.top_ids) for r in recs[: len(s.ids)]]
            s.top_probs = [list(r.top_probs) for r in recs[: len(s.ids)]]
            s.top_gumbels = [list(r.top_gumbels or ()) for r in recs[: len(s.ids)]]
        eos = bool(s.ids) and s.ids[-1] in self.stop_ids
        self._finish(s, s.finish or ("eos" if eos else "length"))

    def _drop(self, tag: str, inflight: dict[str, Seq]) -> None:
        self.backend.abort(tag)
        inflight.pop(tag, None)
        flush_pending()
        TRACES.pop(tag, None)

    def _finish(self, s: Seq, finish: str) -> None:
        s.finish = finish
        if s.tracker is not None:
            s.text = s.tracker.text
            if s.on_token is not None:
                tail = s.tracker.delta(final=True)
                if tail:
                    s.on_token(s, tail)
        self._done(s)


def _token_logprobs(token: int, step: dict, k: int) -> tuple[float, list[tuple[int, float]]]:
    """(the chosen token's log-probability, the k most likely (id, log-probability)) of one step of
    vLLM's ``logprobs`` (raw logits: the model's distribution at temperature 1)."""
    # vLLM returns the k most likely and the chosen token: the chosen one is among the first k only
    # when it is one of the k most likely
    alts = sorted(((int(t), float(lp.logprob)) for t, lp in step.items()), key=lambda x: -x[1])
    return float(step[token].logprob), alts[:k]


def _prompt_logprobs(prompt: list[int], steps: list, k: int) -> tuple[list[float | None], list]:
    """vLLM's ``prompt_logprobs`` as the transformers worker reports them: per prompt token its
    log-probability given the ones before (the first: None) and the k most likely alternatives."""
    lps: list[float | None] = [None]
    tops: list = [None]
    for t, step in zip(prompt[1:], steps[1:]):
        lps.append(float(step[t].logprob))
        alts = sorted(((int(i), float(v.logprob)) for i, v in step.items()), key=lambda x: -x[1])
        tops.append(alts[:k])
    return lps, tops
