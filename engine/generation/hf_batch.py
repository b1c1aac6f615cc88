"""Batch state of the transformers loop (rows, joins, finishes) and the two batching strategies.

* :class:`BatchState`: the rows being decoded, their per-row tensors and KV cache; rows join by a
  re-pack (:func:`.hf_kv.pack`) or by taking a finished row's place, and finish at EOS or
  ``max_new_tokens``.
* :class:`Continuous`: a pending unit takes a finished row's place at once (its prompt KV written
  into the running buffers, its first token sampled from the prompt's logits); a re-pack only
  when a prompt does not fit or the buffers are full, and to drop finished rows when nothing is
  pending. Why: on CPU a decode step costs a fixed weight read plus a little per row, and short
  answers (MCQ letters) leave a static batch mostly empty after a few steps.
* :class:`Static`: batches that run until every row has finished, on transformers' own cache
  (models whose cache layers cannot be re-packed, e.g. sliding windows).

A row's noise is keyed by its own step, so when it joins does not change what it generates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.generation.hf_kv import PreallocLayer, pack
from engine.generation.hf_prefill import PrefillCache
from engine.generation.types import GenConfig, Unit
from engine.sampling import noise
from engine.sampling.keyed import draw


@dataclass
class Row:
    """Host-side state of one batch row: its unit and what it has generated so far."""

    unit: Unit
    ids: list = field(default_factory=list)  # per step: chosen token, its probability,
    probs: list = field(default_factory=list)  # the top-k alternatives, their probabilities
    top_ids: list = field(default_factory=list)  # and Gumbel values
    top_probs: list = field(default_factory=list)
    top_g: list = field(default_factory=list)
    finish: str = "length"


def unit_tensors(units: Sequence[Unit], dev) -> tuple[torch.Tensor, torch.Tensor]:
    """(unit keys, seeds as int64 bits), both (n,), for these units."""
    keys = noise.unit_keys([(u.prompt_id, u.repeat) for u in units]).to(dev)
    seeds = noise.seed_tensor([u.seed for u in units], device=dev)
    return keys, seeds


class BatchState:
    """The rows being decoded. Per-row tensors, all (b,): ``lens`` tokens in the KV cache,
    ``keys`` / ``seed_t`` the noise key, ``step_t`` generated tokens, ``last_pos`` position of the
    last token, ``live`` not finished; ``logits`` (b, V) float32 of the next token."""

    def __init__(self, cfg: GenConfig, token_keys: torch.Tensor, stop: torch.Tensor, dev):
        self.cfg, self.token_keys, self.stop, self.dev = cfg, token_keys, stop, dev
        self.rows: list[Row] = []
        # set by start() (None while no batch runs): the KV cache, and tensors as in the docstring
        self.cache: Any = None
        self.logits: Any = None
        self.mask: Any = None
        self.lens: Any = None
        self.keys: Any = None
        self.seed_t: Any = None
        self.step_t: Any = None
        self.last_pos: Any = None
        self.live: Any = None

    @property
    def n_live(self) -> int:
        return int(self.live.sum()) if self.rows else 0

    def kept(self) -> torch.Tensor:
        """(k,) indices of the live rows."""
        return (
            self.live.nonzero().squeeze(1)
            if self.n_live
            else torch.zeros(0, dtype=torch.long, device=self.dev)
        )

    def free(self) -> torch.Tensor:
        """(f,) indices of the finished rows still in the batch."""
        return (~self.live).nonzero().squeeze(1)

    def clear(self) -> None:
        self.rows, self.live = [], None

    # ---- joining
    def start(self, units: list[Unit], cache, logits: torch.Tensor, mask: torch.Tensor) -> None:
        """A new batch on a prefilled cache: logits (b, V), mask (b, L)."""
        self.cache, self.logits, self.mask = cache, logits, mask
        self.lens = mask.sum(-1)
        self.keys, self.seed_t = unit_tensors(units, self.dev)
        self.step_t, self.last_pos = torch.zeros_like(self.lens), self.lens - 1
        self.live = torch.ones(len(units), dtype=torch.bool, device=self.dev)
        self.rows = [Row(u) for u in units]

    def repack(self, keep: torch.Tensor, new: list[Unit], pre: PrefillCache) -> None:
        """Rebuild the batch from the kept rows and the new units, right-aligned in fresh buffers of
        max row length + 3T columns: T for the rows' own tokens, 2T of slack, so that units can take
        the places of finished rows (:meth:`place`) for 2T steps before the next re-pack."""
        pre.ensure(p for p, _, _ in new)
        dev, nk = self.dev, int(keep.numel())
        new_lp = torch.tensor([pre.length(p) for p, _, _ in new], dtype=torch.long, device=dev)  # (n,)
        lens = torch.cat([self.lens[keep], new_lp]) if nk else new_lp  # (b',)
        W = int(lens.max())
        rows_of: dict[str, list[int]] = {}
        for j, (p, _, _) in enumerate(new):
            rows_of.setdefault(p, []).append(nk + j)
        if self.cache is None:
            self.cache = pre.container  # the container; its layers are replaced here
        old = self.cache.layers if nk else None
        self.cache.layers = pack(
            old,
            keep,
            W,
            W + 3 * self.cfg.max_new_tokens,
            [(pre.kv[p][0], r[0], r[-1] + 1) for p, r in rows_of.items()],
        )
        # the decode loop rebuilds the mask from lens; this one keeps the mask consistent
        self.mask = (torch.arange(W, device=dev)[None, :] >= (W - lens)[:, None]).long()  # (b', W)
        new_logits = torch.stack([pre.kv[p][1] for p, _, _ in new]) if new else None
        self.logits = torch.cat(
            [t for t in (self.logits[keep] if nk else None, new_logits) if t is not None]
        )
        nkeys, nseed = unit_tensors(new, dev)
        zero = torch.zeros(len(new), dtype=torch.long, device=dev)

        def cat(a, b):
            return torch.cat([a[keep], b]) if nk else b

        self.keys, self.seed_t, self.step_t = (
            cat(self.keys, nkeys),
            cat(self.seed_t, nseed),
            cat(self.step_t, zero),
        )
        self.last_pos, self.lens = cat(self.last_pos, new_lp - 1), lens
        self.live = torch.ones(nk + len(new), dtype=torch.bool, device=dev)
        self.rows = [self.rows[i] for i in keep.tolist()] + [Row(u) for u in new]
        pre.joined(new)

    def fits(self, new: list[Unit], pre: PrefillCache) -> bool:
        """Prefill the new prompts; True if the units can take finished rows' places in place
        (every prompt fits left of column n and the buffers have T columns left)."""
        pre.ensure(p for p, _, _ in new)
        n, cap = self.cache.layers[0].n, self.cache.layers[0].kbuf.shape[2]
        return max(pre.length(p) for p, _, _ in new) <= n and n + self.cfg.max_new_tokens <= cap

    def place(self, new: list[Unit], slots: torch.Tensor, pre: PrefillCache) -> None:
        """Units take the places of finished rows: their prompt KV is written into those rows of
        the running buffers (no re-pack), right-aligned with the others at column n."""
        slots = slots[: len(new)]
        groups: dict[str, list[int]] = {}
        for j, (p, _, _) in enumerate(new):
            groups.setdefault(p, []).append(j)
        for p, js in groups.items():
            kv, lg, lp = pre.kv[p]
            idx = slots[js]  # (g,)
            for layer, (pk, pv) in zip(self.cache.layers, kv):
                layer.place(idx, pk, pv)
            self.logits[idx], self.lens[idx], self.last_pos[idx] = lg, lp, lp - 1
        self.keys[slots], self.seed_t[slots] = unit_tensors(new, self.dev)
        self.step_t[slots], self.live[slots] = 0, True
        for j, u in zip(slots.tolist(), new):
            self.rows[j] = Row(u)
        pre.joined(new)

    def select(self, keep: torch.Tensor) -> None:
        """Drop finished rows in place (static batches: the cache's own row selection)."""
        self.cache.batch_select_indices(keep)
        (
            self.logits,
            self.mask,
            self.lens,
            self.keys,
            self.seed_t,
            self.step_t,
            self.last_pos,
            self.live,
        ) = (
            t[keep]
            for t in (
                self.logits,
                self.mask,
                self.lens,
                self.keys,
                self.seed_t,
                self.step_t,
                self.last_pos,
                self.live,
            )
        )
        self.rows = [self.rows[i] for i in keep.tolist()]

    # ---- decoding
    def sample(self, idx: torch.Tensor) -> tuple[torch.Tensor, list[Row]]:
        """Sample the next token of rows ``idx`` (m,), record it for the live ones, retire the rows
        that stop (EOS or max_new_tokens). Returns (tokens (m,), the rows that finished)."""
        cfg, k = self.cfg, self.cfg.trace_top_k
        sd, ky, st = self.seed_t[idx], self.keys[idx], self.step_t[idx]
        # the sampler shared with the vLLM processor: fused kernel on CUDA, bounded temporaries
        d = draw(self.logits[idx], sd, ky, st, self.token_keys, cfg.temperature, cfg.top_k, cfg.top_p, k)
        tokens = d.tokens  # (m,)
        parts: list[torch.Tensor | None] = [tokens, d.probs]
        if k:
            parts += [d.top_ids, d.top_probs, d.top_gumbels]
        eos = torch.isin(tokens, self.stop)  # (m,)
        done = (eos | (st >= cfg.max_new_tokens - 1)) & self.live[idx]  # (m,)
        # one device->host copy per tensor per step (no .item() per row)
        host: list[Any] = [t.tolist() if t is not None else None for t in parts]
        live_h, done_h, eos_h = self.live[idx].tolist(), done.tolist(), eos.tolist()
        finished = []
        for j, r in enumerate(idx.tolist()):
            if not live_h[j]:  # finished earlier, still in the batch until its row is reused
                continue
            row = self.rows[r]
            row.ids.append(host[0][j])
            row.probs.append(host[1][j])
            if k:
                row.top_ids.append(host[2][j])
                row.top_probs.append(host[3][j])
                if host[4] is not None:
                    row.top_g.append(host[4][j])
            if done_h[j]:
                row.finish = "eos" if eos_h[j] else "length"
                finished.append(row)
        self.live[idx] &= ~done
        self.step_t[idx] += 1
        return tokens, finished


class Continuous:
    """Continuous batching on preallocated buffers (see the module docstring)."""

    def __init__(self, pre: PrefillCache, batch_size: int):
        self.pre, self.bs = pre, batch_size

    def admit(self, st: BatchState, todo: list[Unit]) -> None:
        """Refill finished rows from the pending units; when nothing runs, start a batch; when
        nothing is pending, drop finished rows once they are a quarter of the batch (a re-pack
        copies the KV cache; the smaller batch then costs less per step)."""
        n_live, keep = st.n_live, st.kept()
        free = self.bs - n_live
        if todo and n_live and n_live < len(st.rows):
            # in place while every new prompt fits left of column n and the buffers have T columns
            # left; else one re-pack
            slots = st.free()  # (f,)
            take = todo[: len(slots)]
            if st.fits(take, self.pre):
                st.place(take, slots, self.pre)
            else:
                take = todo[:free]
                st.repack(keep, take, self.pre)
            del todo[: len(take)]
        elif todo and (n_live == 0 or free * 4 >= self.bs):
            take = todo[:free]
            st.repack(keep, take, self.pre)
            del todo[: len(take)]
        elif st.rows and (len(st.rows) - n_live) * 4 >= len(st.rows):
            st.repack(keep, [], self.pre)

    def refill(self, st: BatchState, todo: list[Unit], nxt: torch.Tensor) -> list[Row]:
        """The rows freed this step go to pending units now, with their first token sampled from
        their prompt's logits (written into ``nxt``), so that the next forward computes no row for
        a finished unit. Returns the rows that finished at once (a one-token answer)."""
        slots = st.free()  # (f,)
        take = todo[: len(slots)]
        if not (take and st.fits(take, self.pre)):
            return []
        st.place(take, slots, self.pre)
        del todo[: len(take)]
        idx = slots[: len(take)]
        nxt[idx], finished = st.sample(idx)
        return finished

    def attention_mask(self, st: BatchState) -> torch.Tensor:
        """(b, n1 - start): rows right-aligned at column n; columns left of every live row are
        skipped."""
        n1 = st.cache.layers[0].n + 1
        start = n1 - int(st.lens[st.live].max())
        for layer in st.cache.layers:
            layer.read_from(start)
        cols = torch.arange(start, n1, device=st.dev)  # (n1 - start,)
        st.mask = (cols[None, :] >= (n1 - st.lens)[:, None]).long()
        return st.mask


class Static:
    """Static batches on transformers' own cache: a batch runs until its last row finishes."""

    def __init__(self, pre: PrefillCache, batch_size: int):
        self.pre, self.bs = pre, batch_size

    def admit(self, st: BatchState, todo: list[Unit]) -> None:
        """Start a batch when none runs (each prompt prefilled once; the cache's own row selection
        expands it to its units); drop finished rows once they are a quarter of the batch."""
        n_live = st.n_live
        if todo and n_live == 0:
            take = todo[: self.bs]
            uniq = list(dict.fromkeys(p for p, _, _ in take))
            out, pmask = self.pre.whole(uniq)
            sel = torch.tensor([uniq.index(p) for p, _, _ in take], device=st.dev)  # (B,)
            cache = out.past_key_values
            cache.batch_select_indices(sel)
            st.start(take, cache, out.logits[:, -1, :].float()[sel], pmask[sel])  # (B, V), (B, L)
            del todo[: len(take)]
        elif st.rows and (len(st.rows) - n_live) * 4 >= len(st.rows):
            st.select(st.kept())

    def refill(self, st: BatchState, todo: list[Unit], nxt: torch.Tensor) -> list[Row]:
        return []  # rows cannot join a running batch on this cache

    def attention_mask(self, st: BatchState) -> torch.Tensor:
        st.mask = torch.cat([st.mask, st.mask.new_ones(st.mask.shape[0], 1)], dim=1)  # (b, n+1)
        return st.mask


__all__ = ["Row", "BatchState", "Continuous", "Static", "PreallocLayer", "unit_tensors"]
