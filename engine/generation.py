"""Batched coupled / independent generation with keyed Gumbel noise, traces and resumable runs.

The hot loop (:func:`_stream`) is one screen with numbered phases, nanoGPT-style:

1. tokenize   chat template + system prompt, left padding
2. prefill    each *unique* prompt once; its repeats (and both modes) copy its KV rows
3. decode     keyed noise -> Gumbel-max -> next token; per-row stop at EOS or max_new_tokens;
              continuous batching: a pending unit takes a finished row's place at once (its
              prompt KV written into the running buffers, its first token sampled from the
              prompt's logits); a KV re-pack only when a prompt does not fit or the buffers are
              full, and to drop finished rows when nothing is pending
4. detokenize token ids -> text (special tokens skipped)

Coupling lives entirely in the noise key (engine.sampling.noise): a row's noise depends on (seed, prompt id,
repeat, step, token key) and nothing else, so a unit generated alone, inside any batch, or joining
a running batch late draws the same noise. Numerically, padding changes the shapes of the matmuls,
so logits can differ in the last float bits between batch compositions; the chosen token only
changes if two candidates are within that rounding of each other (tests check identity on the tiny
model and on SmolLM2).

:func:`run_generation` is the resumable job on top: deterministic run id from the settings,
vocabulary check up front, one DuckDB transaction per chunk, skip what is stored.
"""

from __future__ import annotations

import gc
import hashlib
import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from transformers.cache_utils import DynamicLayer

import engine
from engine import store
from engine.sampling import noise
from engine.errors import UserError
from engine.progress import Progress
from engine.sampling.gumbel import check_params, sample


# Auto traces: about 1M token traces at MCQ lengths, the size the dashboard is measured on
# (docs/BENCHMARKS.md); a full-MMLU run (1.4M generations) would store ~30M trace rows.
TRACES_AUTO_MAX_UNITS = 50_000


@dataclass(frozen=True)
class GenConfig:
    """Sampling and batching settings of a generation (everything but the seed and the models)."""

    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 20
    batch_size: int = 32
    trace_top_k: int = 5
    record_traces: bool | None = True  # None = auto: on for runs of <= TRACES_AUTO_MAX_UNITS generations

    def __post_init__(self) -> None:
        check_params(self.temperature, self.top_k, self.top_p)
        for name in ("max_new_tokens", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(self.trace_top_k, bool) or not isinstance(self.trace_top_k, int) or self.trace_top_k < 0:
            raise UserError(f"trace_top_k must be an integer >= 0, got {self.trace_top_k!r}")


@dataclass(frozen=True)
class GenResult:
    """One generated unit. Per-step lists have one entry per generated token (EOS included)."""

    prompt_id: str
    repeat: int
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str                                   # 'eos' | 'length'
    seed: int                                            # the noise seed this unit used
    probs: tuple[float, ...]                             # prob of the chosen token, per step
    top_ids: tuple[tuple[int, ...], ...] | None = None   # top-k alternatives per step
    top_probs: tuple[tuple[float, ...], ...] | None = None
    top_gumbels: tuple[tuple[float, ...], ...] | None = None  # None when T = 0 (no noise)


# --------------------------------------------------------------------------- prompts

def chat_text(tokenizer, messages: list[dict]) -> str:
    """The prompt string for a chat (``[{"role", "content"}, ...]``) with the generation prompt.

    Falls back to folding the system message into the user turn when the template rejects a
    system role, and to plain concatenation when the tokenizer has no chat template.
    """
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception:  # templates raise their own error types (e.g. "system role not supported")
            if messages and messages[0]["role"] == "system" and len(messages) > 1:
                merged = [{"role": messages[1]["role"],
                           "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}] + messages[2:]
                return tokenizer.apply_chat_template(merged, add_generation_prompt=True, tokenize=False)
            raise
    return "\n\n".join(m["content"] for m in messages) + "\n"


def prompt_messages(user_prompt: str, system_prompt: str | None) -> list[dict]:
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return msgs + [{"role": "user", "content": user_prompt}]


def _stop_ids(lm) -> set[int]:
    ids: set[int] = set()
    for src in (getattr(lm.tokenizer, "eos_token_id", None),
                getattr(getattr(lm.model, "generation_config", None), "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(i) for i in src)
    return ids


# --------------------------------------------------------------------------- the loop

class _PreallocLayer(DynamicLayer):
    """A KV-cache layer whose buffer is allocated once for the longest row + new tokens.

    Why: ``DynamicLayer.update`` re-concatenates the whole cache every decode step (O(L) copies per
    step, ~12% of CPU time at MMLU prompt lengths); here a step writes one column of a buffer and
    the attention reads a view of the filled part.
    """

    def __init__(self, kbuf: torch.Tensor, vbuf: torch.Tensor, n: int):
        super().__init__()
        self.kbuf, self.vbuf, self.n = kbuf, vbuf, n  # (B, H, cap, D); columns [0, n) are filled
        self.start = 0  # attention reads columns [start, n): the left ones no live row needs are skipped
        self.dtype, self.device, self.is_initialized = kbuf.dtype, kbuf.device, True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self.kbuf[:, :, self.start:self.n], self.vbuf[:, :, self.start:self.n]

    def update(self, key_states, value_states, *args, **kwargs):
        t = key_states.shape[-2]
        if self.n + t > self.kbuf.shape[-2]:  # beyond the planned length: grow (amortised doubling)
            grow = max(self.kbuf.shape[-2], t)
            self.kbuf = torch.cat([self.kbuf, self.kbuf.new_zeros(*self.kbuf.shape[:2], grow, self.kbuf.shape[-1])], 2)
            self.vbuf = torch.cat([self.vbuf, self.vbuf.new_zeros(*self.vbuf.shape[:2], grow, self.vbuf.shape[-1])], 2)
        self.kbuf[:, :, self.n:self.n + t] = key_states
        self.vbuf[:, :, self.n:self.n + t] = value_states
        self.n += t
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.kbuf, self.vbuf = self.kbuf[indices], self.vbuf[indices]
        self._views()

    def place(self, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write one prompt's KV (1, H, lp, D) into ``rows``, right-aligned at column n."""
        lp = k.shape[-2]
        self.kbuf[rows, :, self.n - lp:self.n] = k
        self.vbuf[rows, :, self.n - lp:self.n] = v


def _forward(model, **kw):
    """One model call (a seam for tests that simulate running out of memory)."""
    return model(use_cache=True, **kw)


@dataclass
class _Row:
    """Host-side state of one batch row: its unit and what it has generated so far."""

    unit: tuple[str, int, int]                     # (prompt_id, repeat, seed)
    ids: list = field(default_factory=list)        # per step: chosen token, its probability,
    probs: list = field(default_factory=list)      # the top-k alternatives, their probabilities
    top_ids: list = field(default_factory=list)    # and Gumbel values
    top_probs: list = field(default_factory=list)
    top_g: list = field(default_factory=list)
    finish: str = "length"


@torch.inference_mode()
def _stream(lm, texts: dict[str, str], pending: list[tuple[str, int, int]], cfg: GenConfig,
            token_keys: torch.Tensor, batch_size: int) -> Iterator[list[_Row]]:
    """Continuous batching: decode up to ``batch_size`` rows at once; finished rows are refilled.

    ``pending``: units (prompt_id, repeat, seed), grouped by prompt. Yields the rows that finish at
    each step. A row's noise is keyed by its own step, so when it joins the batch does not matter.
    Why refill: on CPU a decode step costs a fixed weight read plus a little per row, and short
    answers (MCQ letters) leave a static batch mostly empty after a few steps.
    """
    model, tok, dev = lm.model, lm.tokenizer, lm.device
    k, T = cfg.trace_top_k, cfg.max_new_tokens
    stop = torch.tensor(sorted(_stop_ids(lm)) or [-1], device=dev)  # (S,)
    todo = list(pending)
    todo_count = Counter(p for p, _, _ in todo)  # units of each prompt not yet in the batch
    prompt_kv: dict[str, tuple] = {}  # prompt_id -> (per-layer (K, V) (1, H, Lp, D), logits (V,), Lp)
    rows: list[_Row] = []
    cache = logits = mask = None
    lens = keys = seed_t = step_t = last_pos = live = None  # (b,) per-row state tensors

    # A prefix shared by every prompt (system prompt + chat template: ~43 tokens of the demo's ~87)
    # is prefilled once for the whole stream; each prompt then prefills only its own suffix.
    tok_ids = {p: tok(texts[p], add_special_tokens=False)["input_ids"] for p in dict.fromkeys(u[0] for u in todo)}
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    P = _common_prefix(list(tok_ids.values())) if len(tok_ids) > 1 else 0
    # Longest prompts first (a stable sort keeps each prompt's units together): rows of similar
    # length share the batch, so less left padding is prefilled and read from the KV cache.
    todo.sort(key=lambda u: -len(tok_ids[u[0]]))
    prefix_kv = None  # per-layer (K, V) (1, H, P, D) once computed

    def prefill(pids: list[str]) -> bool:
        """1-2. tokenize (left padding) and prefill each new prompt once; keep its KV per prompt.
        Returns False when the model's cache has layers we cannot re-pack (sliding windows...)."""
        nonlocal cache, prefix_kv, P
        if P and prefix_kv is None:
            pre = torch.tensor([tok_ids[pids[0]][:P]], device=dev)  # (1, P)
            out = _forward(model, input_ids=pre, position_ids=torch.arange(P, device=dev)[None], logits_to_keep=1)
            if not all(type(layer) is DynamicLayer for layer in out.past_key_values.layers):
                P = 0  # cannot extend this cache type row by row: prefill whole prompts
            else:
                prefix_kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        suf = [tok_ids[p][P:] for p in pids]
        ids, smask = _left_pad(suf, pad, dev)  # (U, Ls)
        Ls = ids.shape[1]
        pos = P + (smask.cumsum(-1) - 1).clamp(min=0)  # (U, Ls) positions ignore the padding
        kw = {}
        if P:
            from transformers import DynamicCache
            U = len(pids)
            kw["past_key_values"] = DynamicCache(ddp_cache_data=[(k.expand(U, -1, -1, -1).contiguous(),
                                                                  v.expand(U, -1, -1, -1).contiguous())
                                                                 for k, v in prefix_kv])
            smask = torch.cat([smask.new_ones(U, P), smask], dim=1)  # (U, P + Ls)
        out = _forward(model, input_ids=ids, attention_mask=smask, position_ids=pos, logits_to_keep=1, **kw)
        layers = out.past_key_values.layers
        if not all(type(layer) is DynamicLayer for layer in layers):
            return False
        if cache is None:
            cache = out.past_key_values  # the container (its layers are replaced by repack)
        lg = out.logits[:, -1, :].float()  # (U, V) float32 once
        for u, (p, x) in enumerate(zip(pids, suf)):
            a = P + Ls - len(x)  # first suffix column of this prompt
            kv = [(layer.keys[u:u + 1, :, a:], layer.values[u:u + 1, :, a:]) for layer in layers]
            if P:  # prefix columns + this prompt's suffix, contiguous
                kv = [(torch.cat([pk, k], 2), torch.cat([pv, v], 2)) for (pk, pv), (k, v) in zip(prefix_kv, kv)]
            prompt_kv[p] = (kv, lg[u], P + len(x))
        return True

    def repack(keep: torch.Tensor, new: list[tuple[str, int, int]]) -> None:
        """Rebuild the batch from the kept rows and the new units, right-aligned in fresh buffers of
        max row length + 3T columns: T for the rows' own tokens, 2T of slack, so that units can take
        the places of finished rows (:func:`place`) for 2T steps before the next re-pack."""
        nonlocal cache, logits, mask, lens, keys, seed_t, step_t, last_pos, live, rows
        need = [p for p in dict.fromkeys(p for p, _, _ in new) if p not in prompt_kv]
        if need and not prefill(need):
            raise _NoRepack
        nk = int(keep.numel())
        new_lp = torch.tensor([prompt_kv[p][2] for p, _, _ in new], dtype=torch.long, device=dev)  # (n,)
        all_lens = torch.cat([lens[keep], new_lp]) if nk else new_lp  # (b',)
        W = int(all_lens.max())
        n_old = cache.layers[0].n if nk else 0
        w = min(W, n_old)  # kept rows are right-aligned at n_old; their lens are <= W
        groups = {}
        for j, (p, _, _) in enumerate(new):
            groups.setdefault(p, []).append(nk + j)
        b2, layers = nk + len(new), []
        # per layer, a (K, V) pair to take head counts, head dims, dtype and device from
        shapes = [(layer.kbuf, layer.vbuf) for layer in cache.layers] if nk else prompt_kv[new[0][0]][0]
        for li, (k0, v0) in enumerate(shapes):
            # Columns >= W are written before they are read; the left padding is read (and masked),
            # so it must be finite: zeroed, since fresh memory may hold NaN bit patterns.
            kb = k0.new_empty(b2, k0.shape[1], W + 3 * T, k0.shape[-1])  # (b', H, W + 3T, D)
            vb = v0.new_empty(b2, v0.shape[1], W + 3 * T, v0.shape[-1])
            if nk:
                src = cache.layers[li]
                kb[:nk, :, :W - w].zero_(); vb[:nk, :, :W - w].zero_()
                kb[:nk, :, W - w:W] = src.kbuf[keep, :, n_old - w:n_old]
                vb[:nk, :, W - w:W] = src.vbuf[keep, :, n_old - w:n_old]
            for p, idx in groups.items():
                pk, pv = prompt_kv[p][0][li]
                lp, r0, r1 = pk.shape[-2], idx[0], idx[-1] + 1  # a prompt's rows are contiguous
                kb[r0:r1, :, :W - lp].zero_(); vb[r0:r1, :, :W - lp].zero_()
                kb[r0:r1, :, W - lp:W] = pk
                vb[r0:r1, :, W - lp:W] = pv
            layers.append(_PreallocLayer(kb, vb, W))
        cache.layers = layers
        # the decode loop rebuilds the mask from lens; this one keeps a switch to static batches
        # (which grow the mask by a column per step) consistent
        mask = (torch.arange(W, device=dev)[None, :] >= (W - all_lens)[:, None]).long()  # (b', W)
        new_logits = torch.stack([prompt_kv[p][1] for p, _, _ in new]) if new else None
        parts = [t for t in (logits[keep] if nk else None, new_logits) if t is not None]
        logits = torch.cat(parts)  # (b', V)
        nkeys, nseed = _unit_tensors(new, dev)
        zero = torch.zeros(len(new), dtype=torch.long, device=dev)
        cat = (lambda a, b_: torch.cat([a[keep], b_]) if nk else b_)
        keys, seed_t, step_t = cat(keys, nkeys), cat(seed_t, nseed), cat(step_t, zero)
        last_pos, lens = cat(last_pos, new_lp - 1), all_lens
        live = torch.ones(b2, dtype=torch.bool, device=dev)
        rows = [rows[i] for i in keep.tolist()] + [_Row(u) for u in new]
        joined(new)

    def joined(new: list[tuple[str, int, int]]) -> None:
        for p, _, _ in new:
            todo_count[p] -= 1
            if not todo_count[p]:
                del prompt_kv[p]  # every unit of this prompt has joined: its prefill is no longer needed

    def place(new: list[tuple[str, int, int]], slots: torch.Tensor) -> None:
        """Units take the places of finished rows: their prompt KV is written into those rows of
        the running buffers (no re-pack), right-aligned with the others at column n."""
        nonlocal logits, lens, keys, seed_t, step_t, last_pos, live
        slots = slots[:len(new)]
        groups: dict[str, list[int]] = {}
        for j, (p, _, _) in enumerate(new):
            groups.setdefault(p, []).append(j)
        for p, js in groups.items():
            kv, lg, lp = prompt_kv[p]
            idx = slots[js]  # (g,)
            for layer, (pk, pv) in zip(cache.layers, kv):
                layer.place(idx, pk, pv)
            logits[idx], lens[idx], last_pos[idx] = lg, lp, lp - 1
        keys[slots], seed_t[slots] = _unit_tensors(new, dev)
        step_t[slots], live[slots] = 0, True
        for j, u in zip(slots.tolist(), new):
            rows[j] = _Row(u)
        joined(new)

    def select(keep: torch.Tensor) -> None:
        """Drop finished rows in place (static batches: the cache's own row selection)."""
        nonlocal logits, mask, lens, keys, seed_t, step_t, last_pos, live, rows
        cache.batch_select_indices(keep)
        logits, mask, lens, keys, seed_t, step_t, last_pos, live = (
            t[keep] for t in (logits, mask, lens, keys, seed_t, step_t, last_pos, live))
        rows = [rows[i] for i in keep.tolist()]

    def sample_rows(idx: torch.Tensor) -> tuple[torch.Tensor, list[_Row]]:
        """Sample the next token of rows ``idx`` (m,), record it for the live ones, retire the rows
        that stop (EOS or max_new_tokens). Returns (tokens (m,), the rows that finished)."""
        sd, ky, st = seed_t[idx], keys[idx], step_t[idx]
        g = noise.gumbel(sd, ky, st, token_keys) if cfg.temperature > 0 else None  # (m, V)
        s = sample(logits[idx], g, cfg.temperature, cfg.top_k, cfg.top_p)
        tokens = s.tokens  # (m,)
        p_tok = s.logprobs.gather(1, tokens[:, None]).squeeze(1).exp()  # (m,)
        parts = [tokens, p_tok]
        if k:
            tv, ti = torch.topk(s.logprobs, min(k, s.logprobs.shape[-1]), dim=-1)  # (m, k)
            parts += [ti, tv.exp(), g.gather(1, ti) if g is not None else None]
        eos = torch.isin(tokens, stop)  # (m,)
        done = (eos | (st >= T - 1)) & live[idx]  # (m,)
        # one device->host copy per tensor per step (no .item() per row)
        host = [t.tolist() if t is not None else None for t in parts]
        live_h, done_h, eos_h = live[idx].tolist(), done.tolist(), eos.tolist()
        finished = []
        for j, r in enumerate(idx.tolist()):
            if not live_h[j]:  # finished earlier, still in the batch until its row is reused
                continue
            row = rows[r]
            row.ids.append(host[0][j]); row.probs.append(host[1][j])
            if k:
                row.top_ids.append(host[2][j]); row.top_probs.append(host[3][j])
                if host[4] is not None:
                    row.top_g.append(host[4][j])
            if done_h[j]:
                row.finish = "eos" if eos_h[j] else "length"
                finished.append(row)
        live[idx] &= ~done
        step_t[idx] += 1
        return tokens, finished

    def fits(new: list[tuple[str, int, int]]) -> bool:
        """Prefill the new prompts; True if the units can take finished rows' places in place
        (every prompt fits left of column n and the buffers have T columns left)."""
        nonlocal continuous
        need = [p for p in dict.fromkeys(p for p, _, _ in new) if p not in prompt_kv]
        if need and not prefill(need):  # a cache we cannot re-pack (not expected mid-run)
            continuous = False
            return False
        n, cap = cache.layers[0].n, cache.layers[0].kbuf.shape[2]
        return max(prompt_kv[p][2] for p, _, _ in new) <= n and n + T <= cap

    continuous = True
    while True:
        # Refill finished rows from the pending units; when nothing runs, start a batch; when
        # nothing is pending, drop finished rows once they are a quarter of the batch (a re-pack
        # copies the KV cache; the smaller batch then costs less per step).
        n_live = int(live.sum()) if rows else 0
        free = batch_size - n_live
        keep = live.nonzero().squeeze(1) if n_live else torch.zeros(0, dtype=torch.long, device=dev)
        if continuous and todo and n_live and n_live < len(rows):
            # finished rows are taken by pending units at once: in place while every new prompt
            # fits left of column n and the buffers have T columns left; else one re-pack
            slots = (~live).nonzero().squeeze(1)  # (f,)
            take = todo[:len(slots)]
            if fits(take):
                place(take, slots)
            elif not continuous:
                continue
            else:
                take = todo[:free]
                try:
                    repack(keep, take)
                except _NoRepack:
                    continuous = False
                    continue
            del todo[:len(take)]
        elif todo and (n_live == 0 or (continuous and free * 4 >= batch_size)):
            take = todo[:free]
            if continuous:
                try:
                    repack(keep, take)
                except _NoRepack:  # e.g. sliding-window layers: static batches from now on
                    continuous = False
            if not continuous:
                if n_live:  # cannot mix a running batch with new rows: finish it first
                    select(keep)
                    take = []
                else:  # prefill the batch's prompts once; the cache's own row selection expands them
                    uniq = list(dict.fromkeys(p for p, _, _ in take))
                    ids, pmask = _left_pad([tok_ids[p] for p in uniq], pad, dev)  # (U, L)
                    out = _forward(model, input_ids=ids, attention_mask=pmask,
                                   position_ids=(pmask.cumsum(-1) - 1).clamp(min=0), logits_to_keep=1)
                    sel = torch.tensor([uniq.index(p) for p, _, _ in take], device=dev)  # (B,)
                    cache = out.past_key_values
                    cache.batch_select_indices(sel)
                    logits, mask = out.logits[:, -1, :].float()[sel], pmask[sel]  # (B, V), (B, L)
                    lens = mask.sum(-1)
                    keys, seed_t = _unit_tensors(take, dev)
                    step_t, last_pos = torch.zeros_like(lens), lens - 1
                    live, rows = torch.ones(len(take), dtype=torch.bool, device=dev), [_Row(u) for u in take]
            del todo[:len(take)]
        elif rows and (len(rows) - n_live) * 4 >= len(rows):
            repack(keep, []) if continuous else select(keep)
        if not rows:
            return
        # 3. decode: keyed noise -> Gumbel-max -> next token, per-row step (rows joined at different times)
        nxt, finished = sample_rows(torch.arange(len(rows), device=dev))
        if finished:
            yield finished
            # the freed rows go to pending units now, with their first token sampled from their
            # prompt's logits, so that the next forward computes no row for a finished unit
            slots = (~live).nonzero().squeeze(1)  # (f,)
            take = todo[:len(slots)]
            if continuous and take and fits(take):
                place(take, slots)
                del todo[:len(take)]
                idx = slots[:len(take)]
                nxt[idx], finished = sample_rows(idx)
                if finished:
                    yield finished
        if not bool(live.any()):
            rows, live = [], None
            continue
        last_pos, lens = last_pos + 1, lens + 1  # (b,)
        if continuous:  # rows right-aligned at column n; columns left of every live row are skipped
            n1 = cache.layers[0].n + 1
            start = n1 - int(lens[live].max())
            for layer in cache.layers:
                layer.start = start
                layer._views()
            cols = torch.arange(start, n1, device=dev)  # (n1 - start,)
            mask = (cols[None, :] >= (n1 - lens)[:, None]).long()  # (b, n1 - start)
        else:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # (b, n+1)
        out = _forward(model, input_ids=nxt[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                       past_key_values=cache)
        logits = out.logits[:, -1, :].float()  # (b, V)


def _left_pad(seqs: list[list[int]], pad: int, dev) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id lists -> (ids, attention mask), both (U, max len), left padded."""
    L = max(map(len, seqs))
    ids = torch.tensor([[pad] * (L - len(x)) + list(x) for x in seqs], device=dev)
    mask = torch.tensor([[0] * (L - len(x)) + [1] * len(x) for x in seqs], device=dev)
    return ids, mask


def _unit_tensors(units: Sequence[tuple[str, int, int]], dev) -> tuple[torch.Tensor, torch.Tensor]:
    """(unit keys, seeds as int64 bits), both (n,), for units (prompt_id, repeat, seed)."""
    keys = noise.unit_keys([(p, r) for p, r, _ in units]).to(dev)
    seeds = noise.seed_tensor([sd for _, _, sd in units], device=dev)
    return keys, seeds


def _common_prefix(seqs: list[list[int]], min_len: int = 8) -> int:
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


class _NoRepack(Exception):
    """The model's KV cache has layers that cannot be re-packed row by row."""


def _detok(lm, rows: list[_Row], stop_ids: set[int]) -> list[str]:
    """4. detokenize (the stop token is kept in token_ids/traces, not in the text)."""
    return lm.tokenizer.batch_decode([[t for t in r.ids if t not in stop_ids] for r in rows], skip_special_tokens=True)


def _is_oom(exc: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, oom) or "out of memory" in str(exc).lower()


def iter_generate(lm, prompts: dict[str, str] | Sequence, units: Sequence[tuple[str, int]],
                  seed: int | Sequence[int],
                  cfg: GenConfig, token_keys: torch.Tensor | None = None,
                  system_prompt: str | None = None) -> Iterator[list[GenResult]]:
    """Generate ``units`` with continuous batching, yielding completed results in chunks of about
    ``cfg.batch_size`` (list of GenResult, in completion order).

    Units are grouped by prompt so that the repeats of a prompt share one prefill. On CUDA
    out-of-memory the batch size is halved and the unfinished units are generated again (nothing
    is lost: a unit is only yielded when complete, and its result does not depend on the batch).

    Args:
        lm: a models.LoadedModel (or any object with .model, .tokenizer, .device).
        prompts: prompt_id -> user prompt string, or a sequence of objects with .prompt_id and
            .user_prompt (datasets.Prompt).
        units: (prompt_id, repeat) pairs.
        seed: the noise seed (shared by all models in coupled mode), or one seed per unit (a
            run's coupled and independent units of one prompt then share one prefill).
        token_keys: LongTensor (V,) (default: token ids over the model's logit width).
        system_prompt: prepended as a system message when given.
    """
    if not isinstance(prompts, dict):
        prompts = {p.prompt_id: p.user_prompt for p in prompts}
    missing = sorted({p for p, _ in units} - set(prompts))
    if missing:
        raise UserError(f"units refer to unknown prompt ids: {missing[:5]}")
    V = int(lm.model.get_output_embeddings().weight.shape[0])  # the logits' width
    if token_keys is None:
        token_keys = noise.token_keys_for(lm.tokenizer, "token_id", vocab_size=V)
    token_keys = token_keys.to(lm.device)
    if token_keys.shape[0] != V:
        raise UserError(f"token_keys has {token_keys.shape[0]} entries but the model's logits are {V} wide")
    seeds = [int(seed)] * len(units) if isinstance(seed, int) else [int(x) for x in seed]
    if len(seeds) != len(units):
        raise UserError(f"got {len(seeds)} seeds for {len(units)} units")
    order: dict[str, list[tuple[str, int, int]]] = {}
    for u, sd in zip(units, seeds):
        order.setdefault(u[0], []).append((u[0], int(u[1]), sd))
    todo = [u for us in order.values() for u in us]
    texts = {p: chat_text(lm.tokenizer, prompt_messages(prompts[p], system_prompt)) for p in order}
    stop_ids = _stop_ids(lm)
    bs, buf, done = cfg.batch_size, [], set()
    while todo:
        try:
            for rows in _stream(lm, texts, todo, cfg, token_keys, bs):
                for row, text in zip(rows, _detok(lm, rows, stop_ids)):
                    p, r, sd = row.unit
                    done.add(row.unit)
                    buf.append(GenResult(
                        prompt_id=p, repeat=r, token_ids=tuple(row.ids), text=text, finish_reason=row.finish,
                        seed=sd, probs=tuple(row.probs),
                        top_ids=tuple(map(tuple, row.top_ids)) if cfg.trace_top_k else None,
                        top_probs=tuple(map(tuple, row.top_probs)) if cfg.trace_top_k else None,
                        top_gumbels=tuple(map(tuple, row.top_g)) if cfg.trace_top_k and row.top_g else None))
                if len(buf) >= cfg.batch_size:
                    yield buf
                    buf = []
            todo = []
        except RuntimeError as exc:
            if not _is_oom(exc) or bs == 1:
                raise
            bs = max(1, bs // 2)  # halve and go on with the units not finished yet
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            todo = [u for u in todo if u not in done]
    if buf:
        yield buf


def generate_units(lm, prompts, units: Sequence[tuple[str, int]], seed: int | Sequence[int],
                   cfg: GenConfig = GenConfig(), token_keys: torch.Tensor | None = None,
                   system_prompt: str | None = None) -> list[GenResult]:
    """All units generated (batched), returned in the order of ``units``. See :func:`iter_generate`."""
    seeds = [int(seed)] * len(units) if isinstance(seed, int) else [int(x) for x in seed]
    got = {(r.prompt_id, r.repeat, r.seed): r
           for chunk in iter_generate(lm, prompts, units, seeds, cfg, token_keys, system_prompt) for r in chunk}
    return [got[(p, int(r), sd)] for (p, r), sd in zip(units, seeds)]


def complete(lm, messages_list: Sequence[list[dict]], max_new_tokens: int = 64, temperature: float = 0.0,
             seed: int = 0, batch_size: int = 16) -> list[str]:
    """Generate one reply per chat (``[{"role", "content"}, ...]``); greedy by default.

    Used by the LLM judge and entailment clustering. With temperature > 0 the noise is keyed by
    the chat's index in ``messages_list`` (repeat 0), so results are reproducible for a seed.
    """
    cfg = GenConfig(temperature=temperature, max_new_tokens=max_new_tokens, batch_size=batch_size,
                    trace_top_k=0, record_traces=False)
    ids = [f"complete:{j}" for j in range(len(messages_list))]
    texts = {pid: chat_text(lm.tokenizer, list(m)) for pid, m in zip(ids, messages_list)}
    V = int(lm.model.get_output_embeddings().weight.shape[0])
    keys = noise.token_keys_for(lm.tokenizer, "token_id", vocab_size=V).to(lm.device)
    out: dict[str, str] = {}
    stop_ids = _stop_ids(lm)
    for rows in _stream(lm, texts, [(pid, 0, seed) for pid in ids], cfg, keys, batch_size):
        out.update((row.unit[0], t) for row, t in zip(rows, _detok(lm, rows, stop_ids)))
    return [out[pid] for pid in ids]


# --------------------------------------------------------------------------- resumable runs

def code_version() -> str:
    """engine.__version__ plus the git commit when available."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"{engine.__version__}+{rev}" if rev else engine.__version__


def _model_name(m) -> str:
    return m if isinstance(m, str) else m.name


def _vocab_ids(model_list: Sequence, trust_remote_code: bool = False) -> dict[str, str]:
    """vocab_id per model from its tokenizer alone (loaded models: their own id; never weights)."""
    from engine import models

    return {_model_name(m): (m.vocab_id if not isinstance(m, str)
                             else models.vocab_id_of(m, trust_remote_code=trust_remote_code))
            for m in model_list}


def run_id_for(settings: dict) -> str:
    """Deterministic run id: blake2b of the result-determining settings (model order ignored)."""
    blob = json.dumps(settings, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return "run-" + hashlib.blake2b(blob, digest_size=6).hexdigest()


def _dataset_rows(dataset) -> tuple[dict, list[tuple]]:
    prompts = list(dataset.prompts)
    ds = {"dataset_id": dataset.dataset_id, "source": str(getattr(dataset, "source", "")),
          "kind": getattr(dataset, "kind", "prompts"), "n_prompts": len(prompts)}
    rows = []
    for i, p in enumerate(prompts):
        choices = getattr(p, "choices", None)
        rows.append((dataset.dataset_id, p.prompt_id, i, getattr(p, "subject", None),
                     getattr(p, "question", None), json.dumps(choices) if choices else None,
                     None if getattr(p, "gold", None) is None else str(p.gold), p.user_prompt))
    return ds, rows


def _write_chunk(db, run_id: str, model: str, mode_of: dict[int, str], results: list[GenResult],
                 tokenizer, record_traces: bool) -> None:
    """One transaction: the chunk's generations and token traces (all or nothing).

    ``mode_of`` maps each noise seed to its mode (coupled: the run seed; independent: per model).
    """
    gens = pd.DataFrame({
        "run_id": run_id, "model": model, "prompt_id": [r.prompt_id for r in results],
        "repeat": [r.repeat for r in results], "mode": [mode_of[r.seed] for r in results],
        "seed": [r.seed for r in results],
        "text": [r.text for r in results], "token_ids": [list(r.token_ids) for r in results],
        "finish_reason": [r.finish_reason for r in results],
        "n_tokens": [len(r.token_ids) for r in results]})
    tr = []
    if record_traces:
        for r in results:
            pieces = tokenizer.convert_ids_to_tokens(list(r.token_ids))
            for s, (t, p) in enumerate(zip(r.token_ids, r.probs)):
                tr.append((run_id, model, r.prompt_id, r.repeat, mode_of[r.seed], s, t, pieces[s], p,
                           list(r.top_ids[s]) if r.top_ids else None,
                           list(r.top_probs[s]) if r.top_probs else None,
                           list(r.top_gumbels[s]) if r.top_gumbels else None))
    traces = pd.DataFrame(tr, columns=["run_id", "model", "prompt_id", "repeat", "mode", "step", "token_id",
                                       "token_text", "prob", "top_ids", "top_probs", "top_gumbels"])
    with store.writer(db) as con:
        con.begin()
        con.register("chunk_gens", gens)
        con.execute("""INSERT OR IGNORE INTO generations
            (run_id, model, prompt_id, repeat, mode, seed, text, token_ids, finish_reason, n_tokens)
            SELECT run_id, model, prompt_id, repeat, mode, seed, text,
                   CAST(token_ids AS INTEGER[]), finish_reason, n_tokens FROM chunk_gens""")
        if len(traces):
            con.register("chunk_traces", traces)
            con.execute("""INSERT OR IGNORE INTO token_traces
                (run_id, model, prompt_id, repeat, mode, step, token_id, token_text, prob,
                 top_ids, top_probs, top_gumbels)
                SELECT run_id, model, prompt_id, repeat, mode, step, token_id, token_text, prob,
                       CAST(top_ids AS INTEGER[]), CAST(top_probs AS FLOAT[]),
                       CAST(top_gumbels AS FLOAT[]) FROM chunk_traces""")
        con.commit()


def _set_status(db, run_id: str, status: str) -> None:
    with store.writer(db) as con:
        con.execute("UPDATE runs SET status = ? WHERE run_id = ?", [status, run_id])


class _SigtermAsInterrupt:
    """SIGTERM -> KeyboardInterrupt in the main thread, so a cancelled job unwinds cleanly."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            def handler(signum, frame):
                raise KeyboardInterrupt("SIGTERM")
            self.old = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False


def run_generation(db, model_names: Sequence, dataset, repeats: int, modes: Sequence[str] = ("coupled",),
                   seed: int = 0, cfg: GenConfig = GenConfig(), progress_file=None, run_id: str | None = None,
                   resume: bool = True, device: str | None = None, show_bar: bool = True,
                   _after_chunk=None) -> str:
    """Generate every (model, prompt, repeat, mode) of a run into ``db``; resumable; returns run_id.

    Args:
        db: DuckDB file path.
        model_names: registry names / paths (loaded one at a time), or models.LoadedModel objects.
        dataset: a datasets.Dataset, or a name/path for datasets.load_dataset.
        repeats: generations per prompt (repeat indices 0..repeats-1).
        modes: subset of ("coupled", "independent"). Coupled: every model uses ``seed``;
            independent: each model uses noise.independent_seed(seed, model name).
        seed: noise seed in [0, 2^63).
        cfg: sampling/batching settings.
        progress_file: JSON progress file (engine.progress), optional.
        run_id: explicit id; default: derived from the settings, so rerunning resumes.
        resume: when False, refuse to touch a run id that already has rows.
        _after_chunk: test hook called after each stored chunk (e.g. to inject a failure).

    Returns:
        The run id. The run's status is 'done', or 'cancelled' (SIGTERM / Ctrl-C; re-raised as
        KeyboardInterrupt) or 'failed' (exception re-raised); stored chunks always stay.
    """
    from engine import models as models_mod

    # ---- validate everything before touching the database
    if isinstance(dataset, (str, Path)):
        from engine import datasets as datasets_mod
        dataset = datasets_mod.load_dataset(str(dataset))
    if not model_names:
        raise UserError("no models given; pass at least one model name")
    names = [_model_name(m) for m in model_names]
    if len(set(names)) != len(names):
        raise UserError(f"model names must be distinct, got {names}")
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in store.MODES]
    if bad or not modes:
        raise UserError(f"unknown mode(s) {bad or modes}; allowed: {', '.join(store.MODES)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UserError(f"repeats must be an integer >= 1, got {repeats!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
        raise UserError(f"seed must be an integer in [0, 2^63), got {seed!r}")
    prompts = list(dataset.prompts)
    if not prompts:
        raise UserError(f"dataset {dataset.dataset_id!r} has no prompts")
    pids = [p.prompt_id for p in prompts]
    if len(set(pids)) != len(pids):
        raise UserError(f"dataset {dataset.dataset_id!r} has duplicate prompt ids")
    system_prompt = getattr(dataset, "system_prompt", None)

    # ---- vocabulary check: one shared vocabulary -> token-id keys; else byte-string keys
    vids = _vocab_ids(model_names)
    warnings: list[str] = []
    if len(set(vids.values())) == 1:
        key_mode = "token_id"
    else:
        key_mode = "bytes"
        warnings.append("models do not share one vocabulary (" + ", ".join(f"{n}: {v}" for n, v in vids.items())
                        + "); noise is keyed by token byte strings, so coupling only holds where the "
                        "tokenizers produce the same strings (expect weaker coupling)")

    n_units = len(names) * len(prompts) * repeats * len(modes)
    if cfg.record_traces is None:  # auto: resolved from the run's size, so a rerun resolves the same
        cfg = replace(cfg, record_traces=n_units <= TRACES_AUTO_MAX_UNITS)
        if not cfg.record_traces:
            warnings.append(f"token traces are off for this run ({n_units:,} generations > "
                            f"{TRACES_AUTO_MAX_UNITS:,}); pass --traces on to store them")

    settings = {"models": sorted(names), "dataset_id": dataset.dataset_id,
                "prompt_ids_hash": hashlib.blake2b("\x00".join(pids).encode(), digest_size=8).hexdigest(),
                "system_prompt": system_prompt, "repeats": repeats, "modes": sorted(modes), "seed": seed,
                "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                "max_new_tokens": cfg.max_new_tokens, "record_traces": cfg.record_traces,
                "trace_top_k": cfg.trace_top_k, "key_mode": key_mode}
    run_id = run_id or run_id_for(settings)
    config = {**settings, "models": names, "modes": modes, "batch_size": cfg.batch_size,
              "device": str(device or models_mod.default_device()), "n_prompts": len(prompts)}
    ds_row, prompt_rows = _dataset_rows(dataset)

    with store.writer(db) as con:
        con.begin()
        old = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if old is not None:
            prev = json.loads(old[0])
            prev_id = {k: prev.get(k) for k in settings}
            prev_id["models"], prev_id["modes"] = sorted(prev_id["models"] or []), sorted(prev_id["modes"] or [])
            if prev_id != settings:
                con.rollback()
                diff = sorted(k for k in settings if prev_id.get(k) != settings[k])
                raise UserError(f"run {run_id!r} exists with different settings ({', '.join(diff)}); "
                                "use another --run-id or the original settings")
            if not resume:
                con.rollback()
                raise UserError(f"run {run_id!r} already exists; resume it or pass another --run-id")
            con.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", [run_id])
        else:
            con.execute("""INSERT INTO runs (run_id, dataset_id, config, code_version, key_mode, warnings,
                           status, n_units) VALUES (?, ?, ?, ?, ?, ?, 'running', ?)""",
                        [run_id, dataset.dataset_id, json.dumps(config), code_version(), key_mode,
                         json.dumps(warnings), n_units])
        con.execute("INSERT OR IGNORE INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, ?, ?)",
                    [ds_row["dataset_id"], ds_row["source"], ds_row["kind"], ds_row["n_prompts"]])
        # one set-based insert (executemany is slow for a 14k-prompt MMLU run)
        con.register("new_prompts", pd.DataFrame(prompt_rows, columns=[
            "dataset_id", "prompt_id", "idx", "subject", "question", "choices", "gold", "user_prompt"]).astype(
            {"subject": "object", "question": "object", "choices": "object", "gold": "object"}))
        con.execute("""INSERT OR IGNORE INTO prompts (dataset_id, prompt_id, idx, subject, question, choices, gold,
                       user_prompt) SELECT dataset_id, prompt_id, idx, CAST(subject AS VARCHAR),
                       CAST(question AS VARCHAR), CAST(choices AS JSON), CAST(gold AS VARCHAR), user_prompt
                       FROM new_prompts""")
        con.unregister("new_prompts")
        # a --limit run stores a subset of the dataset's prompts: count what is stored
        con.execute("UPDATE datasets SET n_prompts = (SELECT count(*) FROM prompts WHERE dataset_id = ?) "
                    "WHERE dataset_id = ?", [dataset.dataset_id, dataset.dataset_id])
        stored = con.execute("SELECT model, mode, prompt_id, repeat FROM generations WHERE run_id = ?",
                             [run_id]).fetchall()
        con.commit()
    have = {(m, md, p, r) for m, md, p, r in stored}
    all_units = [(p, r) for p in pids for r in range(repeats)]
    n_done = sum(1 for m in names for md in modes for p, r in all_units if (m, md, p, r) in have)
    prog = Progress(n_units, kind="generate", job=run_id, path=progress_file, done=n_done, show_bar=show_bar)

    status = "failed"
    try:
        with _SigtermAsInterrupt():
            for m in model_names:
                name = _model_name(m)
                todo = {md: [u for u in all_units if (name, md, *u) not in have] for md in modes}
                if not any(todo.values()):
                    continue
                lm = models_mod.load_model(m, device=device) if isinstance(m, str) else m
                rec = lm.record()
                with store.writer(db) as con:
                    con.execute("INSERT OR REPLACE INTO models (name, source, variant, vocab_id, vocab_size, config) "
                                "VALUES (?, ?, ?, ?, ?, ?)", [rec["name"], rec["source"], rec["variant"],
                                                              rec["vocab_id"], rec["vocab_size"], rec["config"]])
                keys = noise.token_keys_for(lm.tokenizer, key_mode, vocab_size=lm.vocab_size, device=lm.device)
                gen_cfg = cfg if cfg.record_traces else replace(cfg, trace_top_k=0)
                # both modes in one stream: a prompt's coupled and independent units share a prefill
                mode_of = {seed if md == "coupled" else noise.independent_seed(seed, name): md for md in modes}
                units = [(u, sd) for sd, md in mode_of.items() for u in todo[md]]
                for chunk in iter_generate(lm, {p.prompt_id: p.user_prompt for p in prompts}, [u for u, _ in units],
                                           [sd for _, sd in units], gen_cfg, keys, system_prompt):
                    _write_chunk(db, run_id, name, mode_of, chunk, lm.tokenizer, cfg.record_traces)
                    prog.update(len(chunk), tokens=sum(len(r.token_ids) for r in chunk), message=name)
                    if _after_chunk is not None:
                        _after_chunk(chunk)
                del lm, keys  # one model in memory at a time
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            status = "done"
    except KeyboardInterrupt:
        status = "cancelled"
        raise
    finally:
        try:
            _set_status(db, run_id, status)
        except Exception as exc:  # never mask the original error (e.g. the file stayed locked)
            print(f"warning: could not mark run {run_id} as {status}: {exc}", file=sys.stderr)
        prog.finish(status, "" if status == "done" else f"{status}: rerun the same command to resume")
    return run_id



def run_settings(db, run_id: str) -> dict[str, Any]:
    """The stored config of a run (UserError listing known runs when absent)."""
    with store.reader(db) as con:
        row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY created_at").fetchall()]
            raise UserError(f"unknown run {run_id!r}; known runs: {', '.join(known) or '(none)'}")
    return json.loads(row[0])


__all__ = ["GenConfig", "GenResult", "iter_generate", "generate_units", "complete", "run_generation",
           "run_id_for", "chat_text", "prompt_messages", "code_version", "run_settings"]
