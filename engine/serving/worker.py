"""Serving layer: one model's worker thread, continuous batching of concurrent requests on the
transformers loop's own parts (engine.generation: prefill cache, batch state, strategies) and its one
sampler (engine.sampling.keyed.draw).

The loop is :func:`engine.generation.hf._stream` with two differences, because requests arrive while
it runs and each asks its own settings:

1. intake   new choices join the pending list between two steps (their prompts registered with
            the prefill cache); an ``echo`` choice's prompt log-probabilities are computed first
2. admit    the batching strategy places pending choices into finished rows or re-packs
3. sample   rows are drawn in groups of equal (T, top-k, top-p, trace) with ``draw(rows=...)``:
            each row's noise is keyed by its own (seed, prompt id, repeat, step), so the groups, the
            batch and the arrival order never change a token; each row stops at its own EOS,
            max_tokens or stop string, or when its client went away
4. forward  one decode step for the live rows

A choice's tokens therefore equal ``engine generate``'s for the same unit and settings, up to the
last float bits of logits computed in different batch shapes (the transformers loop's own caveat).
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from engine.generation.hf_batch import BatchState, Continuous, Row, Static
from engine.generation.hf_prefill import PrefillCache
from engine.generation.prompts import stop_token_ids
from engine.generation.types import GenConfig, Unit
from engine.sampling import noise
from engine.sampling.keyed import draw
from engine.serving.inbox import WorkerThread
from engine.serving.prefix import RequestPrefill
from engine.serving.seq import Seq, ServedUnit, TextTracker

PLAN_TOKENS_MAX = 256  # KV columns planned per row at a re-pack (rows that need more grow the buffers)


def _seq(row: Row) -> Seq:
    return _useq(row.unit)


def _useq(u: Unit) -> Seq:
    """The choice a unit of the batch carries (every unit the worker admits is a ServedUnit)."""
    assert isinstance(u, ServedUnit)
    return u.seq


class ServedState(BatchState):
    """The batch state with per-row settings: each row samples with its own choice's temperature,
    top-k, top-p and trace width, stops at its own max_tokens, and records the model's
    log-probabilities when its client asked for them."""

    def sample(self, idx: torch.Tensor) -> tuple[torch.Tensor, list[Row]]:
        rows = [self.rows[r] for r in idx.tolist()]
        seqs = [_seq(r) for r in rows]
        m = len(rows)
        tokens = torch.empty(m, dtype=torch.long, device=self.dev)
        probs = torch.empty(m, dtype=torch.float32, device=self.dev)
        groups: dict[tuple, list[int]] = {}
        for j, s in enumerate(seqs):
            groups.setdefault(s.params, []).append(j)
        traces: dict[int, tuple] = {}
        for (T, top_k, top_p, k), js in groups.items():
            pos = torch.tensor(js, device=self.dev)
            sub = idx[pos]
            d = draw(
                self.logits,
                self.seed_t[sub],
                self.keys[sub],
                self.step_t[sub],
                self.token_keys,
                T,
                top_k,
                top_p,
                k,
                rows=sub,
            )
            tokens[pos], probs[pos] = d.tokens, d.probs
            if k:
                tid, tpr = d.top_ids.tolist(), d.top_probs.tolist()  # type: ignore[union-attr]
                tg = d.top_gumbels.tolist() if d.top_gumbels is not None else None
                for i, j in enumerate(js):
                    traces[j] = (tid[i], tpr[i], tg[i] if tg is not None else None)
        lp = self._logprobs(idx, seqs, tokens)
        eos = torch.isin(tokens, self.stop)
        tok_h, prob_h, eos_h = tokens.tolist(), probs.tolist(), eos.tolist()
        live_h, step_h = self.live[idx].tolist(), self.step_t[idx].tolist()
        finished, done = [], []
        for j, (row, s) in enumerate(zip(rows, seqs)):
            if not live_h[j]:  # finished earlier, still in the batch until its row is reused
                continue
            t = tok_h[j]
            row.ids.append(t)
            row.probs.append(prob_h[j])
            s.ids.append(t)
            s.probs.append(prob_h[j])
            if j in traces:
                s.top_ids.append(traces[j][0])
                s.top_probs.append(traces[j][1])
                if traces[j][2] is not None:
                    s.top_gumbels.append(traces[j][2])
            if j in lp:
                s.token_logprobs.append(lp[j][0])
                s.top_logprobs.append(lp[j][1])
            stopped = s.tracker.push(t) if s.tracker is not None else False
            finish = (
                "eos"
                if eos_h[j]
                else "stop"
                if stopped
                else "length"
                if step_h[j] >= s.max_tokens - 1
                else ""
            )
            if s.on_token is not None:
                s.on_token(s, s.tracker.delta(final=bool(finish)))
            if finish:
                row.finish = s.finish = finish
                finished.append(row)
                done.append(j)
        if done:
            self.live[idx[torch.tensor(done, device=self.dev)]] = False
        self.step_t[idx] += 1
        return tokens, finished

    def _logprobs(self, idx: torch.Tensor, seqs: list[Seq], tokens: torch.Tensor) -> dict[int, tuple]:
        """j -> (the chosen token's log-probability, [(id, log-probability)] of the top alternatives)
        under the model's own distribution (temperature 1, no masking), for rows that asked."""
        want = [j for j, s in enumerate(seqs) if s.logprobs is not None]
        if not want:
            return {}
        pos = torch.tensor(want, device=self.dev)
        lsm = torch.log_softmax(self.logits[idx[pos]], dim=-1)  # (w, V)
        chosen = lsm.gather(1, tokens[pos][:, None])[:, 0].tolist()
        k = max(seqs[j].logprobs or 0 for j in want)
        top_v, top_i = lsm.topk(k, dim=-1) if k else (None, None)
        out = {}
        for i, j in enumerate(want):
            kj = seqs[j].logprobs or 0
            alts = list(zip(top_i[i, :kj].tolist(), top_v[i, :kj].tolist())) if kj else []  # type: ignore[index]
            out[j] = (chosen[i], alts)
        return out


@torch.inference_mode()
def prompt_logprobs(
    lm, ids: list[int], k: int
) -> tuple[list[float | None], list[list[tuple[int, float]] | None]]:
    """The model's log-probability of each prompt token given the ones before (the first: None) and the
    ``k`` most likely alternatives at each position: what ``echo`` returns (lm-eval's log-likelihood)."""
    x = torch.tensor([ids], device=lm.device)
    lsm = torch.log_softmax(
        lm.model(input_ids=x, use_cache=False).logits[0, :-1].float(), dim=-1
    )  # (L-1, V)
    nxt = x[0, 1:]
    lp = lsm.gather(1, nxt[:, None])[:, 0].tolist()
    top: list[list[tuple[int, float]] | None] = [None]
    if k:
        v, i = lsm.topk(k, dim=-1)
        top += [list(zip(a, b)) for a, b in zip(i.tolist(), v.tolist())]
    else:
        top += [[] for _ in lp]
    return [None, *lp], top


def _insert_grouped(todo: list[Unit], u: Unit) -> None:
    """Append ``u``, or put it right after the last pending unit of its prompt: a re-pack copies each
    prompt's KV into contiguous rows (hf_kv.pack), so a prompt's pending units must stay together."""
    for i in range(len(todo) - 1, -1, -1):
        if todo[i].prompt_id == u.prompt_id:
            todo.insert(i + 1, u)
            return
    todo.append(u)


class ModelWorker(WorkerThread):
    """One model's generation thread. :meth:`submit` hands it choices from any thread; each ends
    with its ``on_done`` called in this thread (finish set, or ``error``)."""

    def __init__(self, name: str, lm, key_mode: str, batch_size: int):
        self.name, self.lm, self.batch_size = name, lm, batch_size
        V = int(lm.model.get_output_embeddings().weight.shape[0])
        self.vocab_size = V
        self.token_keys = noise.token_keys_for(
            lm.tokenizer, "bytes" if key_mode == "bytes" else "token_id", vocab_size=V
        ).to(lm.device)
        self.stop_ids = stop_token_ids(lm)
        self.special = set(self.stop_ids) | set(getattr(lm.tokenizer, "all_special_ids", []) or [])
        self._stop_t = torch.tensor(sorted(self.stop_ids) or [-1], device=lm.device)
        self.prefill: RequestPrefill | None = None  # made by the first session (serving/prefix.py)
        self._start(f"serve-{name}")  # self.running: rows in the batch

    # ---- the worker thread
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._inbox and not self._closing:
                    self._cv.wait()
                if not self._inbox and self._closing:
                    return
            active: list[Seq] = []
            try:
                with torch.inference_mode():
                    self._session(active)
            except Exception as exc:  # a failed forward: every choice of this session gets the error
                self.prefill = None  # its counts may be half updated: start the next session afresh
                for s in active + self._take():
                    if not s.finish:
                        s.error, s.finish = exc, "error"
                        self._done(s)
            finally:
                self.running = 0

    def _finish(self, s: Seq, finish: str | None = None) -> None:
        if finish:
            s.finish = finish
        if s.tracker is not None:
            s.text = s.tracker.text
            if s.on_token is not None:
                tail = s.tracker.delta(final=True)
                if tail:
                    s.on_token(s, tail)
        else:
            s.text = self.lm.tokenizer.decode(
                [t for t in s.ids if t not in self.stop_ids], skip_special_tokens=True
            )
        self._done(s)

    def _intake(self, todo: list[Unit], pre: PrefillCache, held: list[Seq], active: list[Seq]) -> None:
        """1. New choices join ``todo``. A pinned prompt id asked with other tokens than a pending one waits
        until that one has joined the batch (the prefill cache is keyed by prompt id)."""
        taken = self._take()
        active += taken
        new, held[:] = held + taken, []
        pending = {u.prompt_id: _useq(u).prompt for u in todo}
        for s in new:
            if s.cancelled:
                self._finish(s, "cancelled")
                continue
            if s.stop or s.on_token is not None:
                s.tracker = TextTracker(self.lm.tokenizer, s.stop, self.special)
            if s.echo and s.prompt_logprobs is None:
                s.prompt_logprobs, s.prompt_top = prompt_logprobs(self.lm, s.prompt, s.logprobs or 0)
            if s.max_tokens == 0:  # echo only: nothing to generate
                self._finish(s, "length")
                continue
            p = s.unit.prompt_id
            if pending.get(p, s.prompt) != s.prompt:
                held.append(s)
                continue
            pending[p] = pre.tok_ids[p] = s.prompt
            pre.pending[p] += 1
            _insert_grouped(todo, s.served_unit())
        if len(pre.tok_ids) > 2 * len(pending) + 64:  # forget prompts no pending choice needs
            pre.tok_ids = {p: pre.tok_ids[p] for p in pending}
            for p in [p for p, c in pre.pending.items() if c <= 0]:
                del pre.pending[p]

    def _drop_cancelled(self, st: ServedState, todo: list[Unit], pre: PrefillCache) -> None:
        """Rows and pending choices whose client went away end now (nothing of them is stored)."""
        for j, row in enumerate(st.rows):
            s = _seq(row)
            if s.cancelled and not s.finish and bool(st.live[j]):
                st.live[j] = False
                self._finish(s, "cancelled")
        gone = [u for u in todo if _useq(u).cancelled]
        if gone:
            todo[:] = [u for u in todo if not _useq(u).cancelled]
            for u in gone:
                pre.pending[u.prompt_id] -= 1
                if pre.pending[u.prompt_id] <= 0:
                    pre.kv.pop(u.prompt_id, None)
                self._finish(_useq(u), "cancelled")

    def _session(self, active: list[Seq]) -> None:
        """Decode until no choice is pending or running (then the thread waits for the next)."""
        lm, dev = self.lm, self.lm.device
        pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
        if self.prefill is None:  # kept across sessions: the shared prefix and recent prompts
            self.prefill = RequestPrefill(lambda **kw: lm.model(use_cache=True, **kw), pad, dev)
        pre = self.prefill
        st = ServedState(GenConfig(max_new_tokens=1), self.token_keys, self._stop_t, dev)
        todo: list[Unit] = []
        held: list[Seq] = []
        strategy: Continuous | Static | None = None
        while True:
            # 1. intake
            self._intake(todo, pre, held, active)
            if strategy is None:
                if not todo:
                    if held:
                        continue
                    return
                strategy = (Continuous if pre.probe([todo[0].prompt_id]) else Static)(
                    pre, self.batch_size
                )
            self._drop_cancelled(st, todo, pre)
            # 2. admit (the buffers are planned for the longest max_tokens, at most PLAN_TOKENS_MAX)
            plan = min(
                PLAN_TOKENS_MAX,
                max([_useq(u).max_tokens for u in todo] + [_seq(r).max_tokens for r in st.rows] + [1]),
            )
            if plan != st.cfg.max_new_tokens:
                st.cfg = replace(st.cfg, max_new_tokens=plan)
            strategy.admit(st, todo)
            self.running = st.n_live
            if not st.rows:
                if not todo and not held and not self._inbox:
                    return
                continue
            # 3. sample: per-row settings, keyed noise
            nxt, finished = st.sample(torch.arange(len(st.rows), device=dev))
            for row in finished:
                self._finish(_seq(row))
            if finished and (joined := strategy.refill(st, todo, nxt)):
                for row in joined:
                    self._finish(_seq(row))
            if not bool(st.live.any()):
                st.clear()
                continue
            # 4. forward one step for every row
            st.last_pos, st.lens = st.last_pos + 1, st.lens + 1
            out = lm.model(
                use_cache=True,
                input_ids=nxt[:, None],
                attention_mask=strategy.attention_mask(st),
                position_ids=st.last_pos[:, None],
                past_key_values=st.cache,
            )
            st.logits = out.logits[:, -1, :].float()
            active[:] = [s for s in active if not s.finish]


def wait_idle(workers: list[ModelWorker], timeout: float) -> bool:
    """True once no worker has anything queued or running (tests, shutdown)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(w.queued == 0 and w.running == 0 for w in workers):
            return True
        time.sleep(0.01)
    return False
