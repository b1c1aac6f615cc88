"""Our transformers generation loop: batched coupled / independent decoding with keyed Gumbel noise.

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

The resumable job on top (run id, vocabulary check, store writes) is :mod:`engine.generation.run`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import DynamicLayer

from engine.errors import UserError
from engine.generation.prompts import chat_text, prompt_messages, stop_token_ids
from engine.generation.types import GenConfig, GenResult
from engine.sampling import noise
from engine.sampling.gumbel import sample


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
    stop = torch.tensor(sorted(stop_token_ids(lm)) or [-1], device=dev)  # (S,)
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
    stop_ids = stop_token_ids(lm)
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
    stop_ids = stop_token_ids(lm)
    for rows in _stream(lm, texts, [(pid, 0, seed) for pid in ids], cfg, keys, batch_size):
        out.update((row.unit[0], t) for row, t in zip(rows, _detok(lm, rows, stop_ids)))
    return [out[pid] for pid in ids]
