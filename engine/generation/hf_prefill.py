"""Prefill cache of the transformers loop: each prompt is prefilled once, after a prefix that every
prompt shares (system prompt + chat template: ~43 tokens of the demo's ~87) was prefilled once for
the whole stream. A prompt's KV and first logits are kept until its last unit has joined the batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import torch
from transformers import DynamicCache

from engine.generation.hf_kv import repackable
from engine.generation.types import Unit

PromptKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (K, V), each (1, H, Lp, D)


class PrefillCache:
    """Prompt id -> (per-layer KV, first logits (V,) float32, length), filled on demand.

    Args:
        forward: ``forward(**model_kwargs)``, one model call.
        tok_ids: prompt id -> its token ids (chat template applied).
        pending: prompt id -> units of that prompt not yet in the batch (entries are released
            when it reaches 0).
    """

    def __init__(
        self, forward: Callable, tok_ids: dict[str, list[int]], pad: int, dev, pending: Counter
    ):
        self.forward, self.tok_ids, self.pad, self.dev, self.pending = (
            forward,
            tok_ids,
            pad,
            dev,
            pending,
        )
        self.P = common_prefix(list(tok_ids.values())) if len(tok_ids) > 1 else 0
        self.prefix_kv: PromptKV | None = None
        self.kv: dict[str, tuple[PromptKV, torch.Tensor, int]] = {}
        self.container = None  # the first prefill's cache object (the batch replaces its layers)

    def probe(self, first: list[str]) -> bool:
        """The first model calls of a stream: True when the model's cache can be re-packed row by row
        (continuous batching), False for layer types that cannot (sliding windows: static batches).
        With a shared prefix the prefix prefill decides; else the prefill of ``first``."""
        if self.P:
            pre = torch.tensor([self.tok_ids[first[0]][: self.P]], device=self.dev)  # (1, P)
            out = self.forward(
                input_ids=pre, position_ids=torch.arange(self.P, device=self.dev)[None], logits_to_keep=1
            )
            if not repackable(out.past_key_values):
                return False
            self.prefix_kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        return self._prefill(list(dict.fromkeys(first)))

    def ensure(self, pids: Iterable[str]) -> None:
        """Prefill the prompts of ``pids`` not prefilled yet (one batched call)."""
        need = [p for p in dict.fromkeys(pids) if p not in self.kv]
        if need and not self._prefill(need):  # the probe saw a plain cache: a model bug, not input
            raise RuntimeError(
                "the model returned a cache that cannot be re-packed after one that could"
            )

    def _prefill(self, pids: list[str]) -> bool:
        """Prefill each prompt's own suffix after the shared prefix, left padded; keep its KV."""
        P, dev, prefix = self.P, self.dev, self.prefix_kv or []
        suf = [self.tok_ids[p][P:] for p in pids]
        ids, smask = left_pad(suf, self.pad, dev)  # (U, Ls)
        Ls = ids.shape[1]
        pos = P + (smask.cumsum(-1) - 1).clamp(min=0)  # (U, Ls) positions ignore the padding
        kw = {}
        if P:
            U = len(pids)
            kw["past_key_values"] = DynamicCache(
                ddp_cache_data=[
                    (k.expand(U, -1, -1, -1).contiguous(), v.expand(U, -1, -1, -1).contiguous())
                    for k, v in prefix
                ]
            )
            smask = torch.cat([smask.new_ones(U, P), smask], dim=1)  # (U, P + Ls)
        out = self.forward(input_ids=ids, attention_mask=smask, position_ids=pos, logits_to_keep=1, **kw)
        if not repackable(out.past_key_values):
            return False
        layers = out.past_key_values.layers
        if self.container is None:
            self.container = out.past_key_values
        lg = out.logits[:, -1, :].float()  # (U, V) float32 once
        for u, (p, x) in enumerate(zip(pids, suf)):
            a = P + Ls - len(x)  # first suffix column of this prompt
            kv = [(layer.keys[u : u + 1, :, a:], layer.values[u : u + 1, :, a:]) for layer in layers]
            if P:  # prefix columns + this prompt's suffix, contiguous
                kv = [
                    (torch.cat([pk, k], 2), torch.cat([pv, v], 2))
                    for (pk, pv), (k, v) in zip(prefix, kv)
                ]
            self.kv[p] = (kv, lg[u], P + len(x))
        return True

    def length(self, pid: str) -> int:
        return self.kv[pid][2]

    def joined(self, units: Iterable[Unit]) -> None:
        """Units joined the batch; a prompt whose every unit has joined drops its KV."""
        for p, _, _ in units:
            self.pending[p] -= 1
            if not self.pending[p]:
                del self.kv[p]

    def whole(self, pids: list[str]):
        """Static batches: prefill the whole prompts ``pids`` (no prefix, nothing kept).
        Returns (model output, attention mask (U, L))."""
        ids, pmask = left_pad([self.tok_ids[p] for p in pids], self.pad, self.dev)  # (U, L)
        out = self.forward(
            input_ids=ids,
            attention_mask=pmask,
            position_ids=(pmask.cumsum(-1) - 1).clamp(min=0),
            logits_to_keep=1,
        )
        return out, pmask


def left_pad(seqs: list[list[int]], pad: int, dev) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id lists -> (ids, attention mask), both (U, max len), left padded."""
    L = max(map(len, seqs))
    ids = torch.tensor([[pad] * (L - len(x)) + list(x) for x in seqs], device=dev)
    mask = torch.tensor([[0] * (L - len(x)) + [1] * len(x) for x in seqs], device=dev)
    return ids, mask


def common_prefix(seqs: list[list[int]], min_len: int = 8) -> int:
    """Length of the token prefix shared by all ``seqs``, leaving every sequence >= 1 own token
    (its last position gives the first logits); 0 when shorter than ``min_len``."""
    n = min(len(x) for x in seqs) - 1
    first = seqs[0]
    for x in seqs[1:]:
        i = 0
        while i < n and x[i] == first[i]:
            i += 1
        n = i
    return n if n >= min_len else 0
