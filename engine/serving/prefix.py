"""Serving layer: the prefill cache across requests. ``engine generate`` knows every prompt before it
starts, so it prefills the prefix they all share once and each prompt once for all its repeats
(:class:`engine.generation.hf_prefill.PrefillCache`). A server sees requests one at a time; without
this class it prefilled every prompt whole, and a prompt again for each request that arrived after the
previous one's units had joined the batch: 54% of the worker's time on the demo questions
(docs/BENCHMARKS.md, "engine serve"). :class:`RequestPrefill` keeps, for the life of a model's worker:

1. a **shared prefix**: the longest token prefix (at least ``MIN_PREFIX`` tokens) that a new prompt
   shares with the previous prompt (a system prompt and chat template, an lm-eval task's few-shot
   block), prefilled once; prompts that start with it prefill only their own suffix after it. A new
   prompt that does not start with it and shares a long enough prefix with the previous prompt
   replaces it (one prefill of the new prefix).
2. **recent prompts**: a prompt's KV and first logits stay (least recently used first out, at most
   ``budget`` bytes) after its units joined the batch, so the next request with the same tokens (the
   next repeat, an lm-eval ``n`` split into requests) starts without a prefill.

Tokens are unchanged in distribution and key: a prompt's KV after a cached prefix equals its whole
prefill up to the last float bits (the transformers loop's own caveat for different batch shapes).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable

import torch

from engine.generation.hf_kv import repackable
from engine.generation.hf_prefill import PrefillCache, PromptKV, common_prefix
from engine.generation.types import Unit

MIN_PREFIX = 16  # shorter shared prefixes are not worth a cached prefill (and change too often)
RECENT_BYTES = 256 * 2**20  # recent prompts' KV kept per model worker


def _nbytes(kv: PromptKV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


class RequestPrefill(PrefillCache):
    """A :class:`PrefillCache` for requests that arrive one by one (module docstring). The worker
    registers a request's tokens in ``tok_ids`` and counts its pending units in ``pending``, as for
    a run; the cache decides per prefill which prompts start with the shared prefix.

    Counters for tests and benchmarks: ``prefilled_tokens`` (tokens run through the model by prompt
    prefills, the prefix's included), ``reused`` (prompts served from the recent cache)."""

    def __init__(self, forward: Callable, pad: int, dev, budget: int = RECENT_BYTES):
        super().__init__(forward, {}, pad, dev, Counter())
        self.budget = budget
        self.prefix_ids: list[int] = []
        self.recent: OrderedDict[str, tuple[list[int], tuple[PromptKV, torch.Tensor, int]]] = (
            OrderedDict()
        )
        self.recent_bytes = 0
        self.last: list[int] = []  # the previous prompt prefilled (a new prefix is found against it)
        self.can_repack: bool | None = None  # the probe's answer, kept for later sessions
        self.prefilled_tokens = 0
        self.reused = 0

    # ---- the strategy's calls
    def probe(self, first: list[str]) -> bool:
        """Whether the model's cache can be re-packed (asked once per worker; later sessions reuse the
        answer): prefills ``first`` on the way."""
        if self.can_repack is None:
            self.can_repack = self._prefill_grouped(list(dict.fromkeys(first)))
        elif self.can_repack:
            self.ensure(first)
        return self.can_repack  # False: static batches, which prefill whole prompts themselves

    def ensure(self, pids: Iterable[str]) -> None:
        need = [p for p in dict.fromkeys(pids) if p not in self.kv and not self._revive(p)]
        if need and not self._prefill_grouped(need):
            raise RuntimeError(
                "the model returned a cache that cannot be re-packed after one that could"
            )

    def joined(self, units: Iterable[Unit]) -> None:
        """Units joined the batch; a prompt whose every unit has joined moves to the recent cache."""
        for p, _, _ in units:
            self.pending[p] -= 1
            if not self.pending[p]:
                kv, lg, n = self.kv.pop(p)
                self._remember(p, (kv, lg, n))

    # ---- recent prompts
    def _revive(self, pid: str) -> bool:
        hit = self.recent.pop(pid, None)
        if hit is None:
            return False
        ids, entry = hit
        self.recent_bytes -= _nbytes(entry[0])
        if ids != self.tok_ids[pid]:  # the same id with other tokens: prefill again
            return False
        self.kv[pid] = entry
        self.reused += 1
        return True

    def _remember(self, pid: str, entry: tuple[PromptKV, torch.Tensor, int]) -> None:
        kv, lg, n = entry
        # own storage: a slice of a batched prefill would keep the whole batch's tensors alive
        kv = [(k.clone(), v.clone()) for k, v in kv]
        size = _nbytes(kv)
        if size > self.budget:
            return
        self.recent[pid] = (list(self.tok_ids[pid]), (kv, lg.clone(), n))
        self.recent_bytes += size
        while self.recent_bytes > self.budget:
            _, (_, (okv, _, _)) = self.recent.popitem(last=False)
            self.recent_bytes -= _nbytes(okv)

    # ---- prefills
    def _starts(self, ids: list[int]) -> bool:
        P = len(self.prefix_ids)
        return bool(P) and len(ids) > P and ids[:P] == self.prefix_ids

    def _new_prefix(self, pids: list[str]) -> None:
        """Prompts that do not start with the shared prefix: if they share at least MIN_PREFIX tokens
        with each other and the previous prompt, that prefix becomes the shared one (prefilled once)."""
        seqs = [self.tok_ids[p] for p in pids]
        if self.last and all(self.last != s for s in seqs):
            seqs.append(self.last)
        if len(seqs) < 2:
            return
        P = common_prefix(seqs, MIN_PREFIX)
        if not P:
            return
        ids = list(seqs[0][:P])
        out = self.forward(
            input_ids=torch.tensor([ids], device=self.dev),
            position_ids=torch.arange(P, device=self.dev)[None],
            logits_to_keep=1,
        )
        if not repackable(out.past_key_values):
            return
        self.prefilled_tokens += P
        self.prefix_ids = ids
        self.prefix_kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]

    def _prefill_grouped(self, pids: list[str]) -> bool:
        """Prefill ``pids``: those that start with the shared prefix after it, the others whole."""
        starts = {p: self._starts(self.tok_ids[p]) for p in pids}
        if not all(starts.values()):  # a new shared prefix from those that miss it: ask again
            self._new_prefix([p for p in pids if not starts[p]])
            starts = {p: self._starts(self.tok_ids[p]) for p in pids}
        after = [p for p in pids if starts[p]]
        whole = [p for p in pids if not starts[p]]
        ok = True
        for group, P in ((after, len(self.prefix_ids)), (whole, 0)):
            if not group:
                continue
            self.P, saved = P, self.prefix_kv
            if not P:
                self.prefix_kv = None
            try:
                ok = self._prefill(group) and ok
            finally:
                self.prefix_kv = saved
            self.prefilled_tokens += sum(len(self.tok_ids[p]) - P for p in group)
        self.P = 0
        self.last = list(self.tok_ids[pids[-1]])
        return ok
