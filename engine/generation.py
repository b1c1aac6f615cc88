"""Batched coupled / independent generation with keyed Gumbel noise, traces and resumable runs.

The hot loop (:func:`_generate_batch`) is one screen with numbered phases, nanoGPT-style:

1. tokenize   chat template + system prompt, left padding (so every row's last token is at -1)
2. prefill    the *unique* prompts of the batch once; repeats share it (KV cache row expansion)
3. decode     keyed noise -> Gumbel-max -> next token; per-row stop at EOS or max_new_tokens;
              finished rows are dropped from the batch (cache rows selected away)
4. detokenize token ids -> text (special tokens skipped)

Coupling lives entirely in the noise key (engine.noise): a row's noise depends on (seed, prompt id,
repeat, step, token key) and nothing else, so a unit generated alone or inside any batch draws the
same noise. Numerically, padding changes the shapes of the matmuls, so logits can differ in the
last float bits between batch compositions; the chosen token only changes if two candidates are
within that rounding of each other (tests check identity on the tiny model).

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from transformers.cache_utils import DynamicLayer

import engine
from engine import noise, store
from engine.errors import UserError
from engine.progress import Progress
from engine.sampling import check_params, sample


@dataclass(frozen=True)
class GenConfig:
    """Sampling and batching settings of a generation (everything but the seed and the models)."""

    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 20
    batch_size: int = 32
    trace_top_k: int = 5
    record_traces: bool = True

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
    """A KV-cache layer whose buffer is allocated once for prompt + new tokens.

    Why: ``DynamicLayer.update`` re-concatenates the whole cache every decode step (O(L) copies per
    step, ~12% of CPU time at MMLU prompt lengths); here a step writes one column of a buffer and
    the attention reads a view of the filled part. Row selection copies the buffer like before.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        B, H, L, D = keys.shape
        self.kbuf = keys.new_empty(B, H, max(capacity, L), D)  # (B, H, cap, D)
        self.vbuf = values.new_empty(B, H, max(capacity, L), values.shape[-1])
        self.kbuf[:, :, :L] = keys
        self.vbuf[:, :, :L] = values
        self.n = L
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self.kbuf[:, :, :self.n], self.vbuf[:, :, :self.n]

    def update(self, key_states, value_states, *args, **kwargs):
        t = key_states.shape[-2]
        if self.n + t > self.kbuf.shape[-2]:  # beyond the planned length: grow (amortised doubling)
            grow = max(self.kbuf.shape[-2], t)
            self.kbuf = torch.cat([self.kbuf, self.kbuf.new_empty(*self.kbuf.shape[:2], grow, self.kbuf.shape[-1])], 2)
            self.vbuf = torch.cat([self.vbuf, self.vbuf.new_empty(*self.vbuf.shape[:2], grow, self.vbuf.shape[-1])], 2)
        self.kbuf[:, :, self.n:self.n + t] = key_states
        self.vbuf[:, :, self.n:self.n + t] = value_states
        self.n += t
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.kbuf, self.vbuf = self.kbuf[indices], self.vbuf[indices]
        self._views()


def _expand_cache(cache, sel: torch.Tensor, capacity: int) -> None:
    """Rows ``sel`` of the prefill cache (repeats share a prompt row), in preallocated layers."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized:
            cache.layers[i] = _PreallocLayer(layer.keys[sel], layer.values[sel], capacity)
        else:  # sliding-window / other layer types keep their own update rule
            layer.batch_select_indices(sel)


@torch.inference_mode()
def _generate_batch(lm, texts: Sequence[str], row_text: Sequence[int], unit_keys: torch.Tensor,
                    seeds: Sequence[int], cfg: GenConfig, token_keys: torch.Tensor) -> list[dict]:
    """Generate one batch. ``texts``: U unique prompt strings; ``row_text``, ``unit_keys``,
    ``seeds``: (B,) per row (rows of one prompt may carry different seeds, e.g. both modes)."""
    model, tok, dev = lm.model, lm.tokenizer, lm.device
    B, k = len(row_text), cfg.trace_top_k
    stop = torch.tensor(sorted(_stop_ids(lm)) or [-1], device=dev)  # (S,)
    # 1. tokenize: left padding puts every prompt's last token at column -1
    tok.padding_side = "left"
    enc = tok(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"].to(dev), enc["attention_mask"].to(dev)  # (U, L)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (U, L) positions ignore the left padding
    # 2. prefill the U unique prompts once, then expand the cache to the B rows: repeats of a
    #    prompt are rows that select the same cache row (indexing with a repeated row index copies
    #    it into a buffer sized for prompt + max_new_tokens), so no prompt is recomputed per repeat.
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    sel = torch.tensor(list(row_text), device=dev)  # (B,)
    _expand_cache(cache, sel, ids.shape[1] + cfg.max_new_tokens)
    logits = out.logits[:, -1, :].float()[sel]  # (B, V) float32 once
    mask, last_pos = mask[sel], pos[sel, -1]  # (B, L), (B,)
    keys = unit_keys.to(dev)  # (B,)
    seed_t = torch.tensor([noise._signed(int(x)) for x in seeds], dtype=torch.int64, device=dev)  # (B,)
    if logits.shape[-1] != token_keys.shape[0]:
        raise UserError(f"token_keys has {token_keys.shape[0]} entries but the model's logits are "
                        f"{logits.shape[-1]} wide")
    rows = torch.arange(B, device=dev)  # (b,) original row of each batch row
    live = torch.ones(B, dtype=torch.bool, device=dev)  # (b,) rows still generating
    rec: list[dict] = [{"ids": [], "probs": [], "top_ids": [], "top_probs": [], "top_g": [], "finish": "length"}
                       for _ in range(B)]
    # 3. decode: one forward per step for the batch; rows stop at EOS and leave the batch in groups
    for step in range(cfg.max_new_tokens):
        g = noise.gumbel(seed_t, keys, step, token_keys) if cfg.temperature > 0 else None  # (b, V)
        s = sample(logits, g, cfg.temperature, cfg.top_k, cfg.top_p)
        nxt = s.tokens  # (b,)
        p = s.logprobs.gather(1, nxt[:, None]).squeeze(1).exp()  # (b,)
        parts = [rows, nxt, p]
        if k:
            tv, ti = torch.topk(s.logprobs, min(k, s.logprobs.shape[-1]), dim=-1)  # (b, k)
            parts += [ti, tv.exp(), g.gather(1, ti) if g is not None else None]
        # one device->host copy per tensor per step (no .item() per row)
        host = [t.tolist() if t is not None else None for t in parts]
        live_h = live.tolist()
        for j, r in enumerate(host[0]):
            if not live_h[j]:  # finished earlier, still in the batch until the next compaction
                continue
            d = rec[r]
            d["ids"].append(host[1][j]); d["probs"].append(host[2][j])
            if k:
                d["top_ids"].append(host[3][j]); d["top_probs"].append(host[4][j])
                if host[5] is not None:
                    d["top_g"].append(host[5][j])
        done = torch.isin(nxt, stop) & live  # (b,)
        for r in rows[done].tolist():
            rec[r]["finish"] = "eos"
        live &= ~done
        if step == cfg.max_new_tokens - 1 or not bool(live.any()):
            break
        # Drop finished rows once they are a quarter of the batch: copying the KV buffers costs
        # about as much as several decode steps of a finished row, so not after every EOS.
        if int((~live).sum()) * 4 >= live.numel():
            keep = live.nonzero().squeeze(1)  # (b',)
            cache.batch_select_indices(keep)
            rows, keys, seed_t, nxt, live = rows[keep], keys[keep], seed_t[keep], nxt[keep], live[keep]
            mask, last_pos = mask[keep], last_pos[keep]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # (b, L+step+1)
        last_pos = last_pos + 1  # (b,)
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                    past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1, :].float()  # (b, V)
    # 4. detokenize (the stop token is kept in token_ids/traces, not in the text)
    stop_set = set(stop.tolist())
    texts_out = tok.batch_decode([[t for t in d["ids"] if t not in stop_set] for d in rec],
                                 skip_special_tokens=True)
    for d, t in zip(rec, texts_out):
        d["text"] = t
    return rec


def _is_oom(exc: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, oom) or "out of memory" in str(exc).lower()


def iter_generate(lm, prompts: dict[str, str] | Sequence, units: Sequence[tuple[str, int]],
                  seed: int | Sequence[int],
                  cfg: GenConfig, token_keys: torch.Tensor | None = None,
                  system_prompt: str | None = None) -> Iterator[list[GenResult]]:
    """Generate ``units`` in batches, yielding each completed batch (list of GenResult).

    Units are grouped by prompt so that repeats share one prefill. On CUDA out-of-memory the
    batch size is halved and the failed batch retried (nothing is lost: a batch is only yielded
    when complete).

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
    if token_keys is None:
        V = int(lm.model.get_output_embeddings().weight.shape[0])
        token_keys = noise.token_keys_for(lm.tokenizer, "token_id", vocab_size=V)
    token_keys = token_keys.to(lm.device)
    seeds = [int(seed)] * len(units) if isinstance(seed, int) else [int(x) for x in seed]
    if len(seeds) != len(units):
        raise UserError(f"got {len(seeds)} seeds for {len(units)} units")
    order: dict[str, list[tuple[str, int, int]]] = {}
    for u, sd in zip(units, seeds):
        order.setdefault(u[0], []).append((u[0], int(u[1]), sd))
    bs = cfg.batch_size
    # Chunks hold whole prompts (all their pending repeats) while they fit, so each prompt is
    # prefilled once per run instead of once per chunk it straddles.
    pending: list[list[tuple[str, int, int]]] = [[]]
    for us in order.values():
        if len(pending[-1]) + len(us) > bs and pending[-1]:
            pending.append([])
        for u in us:
            if len(pending[-1]) == bs:
                pending.append([])
            pending[-1].append(u)
    pending = [c for c in pending if c]
    text_cache: dict[str, str] = {}
    while pending:
        chunk = pending.pop(0)
        uniq = list(dict.fromkeys(p for p, _, _ in chunk))
        for p in uniq:
            if p not in text_cache:
                text_cache[p] = chat_text(lm.tokenizer, prompt_messages(prompts[p], system_prompt))
        try:
            rec = _generate_batch(lm, [text_cache[p] for p in uniq], [uniq.index(p) for p, _, _ in chunk],
                                  noise.unit_keys([(p, r) for p, r, _ in chunk]), [sd for _, _, sd in chunk],
                                  cfg, token_keys)
        except RuntimeError as exc:
            if not _is_oom(exc) or len(chunk) == 1:
                raise
            bs = max(1, len(chunk) // 2)  # halve and retry this chunk; later chunks use the new size
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            rest = [u for c in pending for u in c]
            pending = [chunk[i:i + bs] for i in range(0, len(chunk), bs)] + \
                      [rest[i:i + bs] for i in range(0, len(rest), bs)]
            continue
        yield [GenResult(prompt_id=p, repeat=r, token_ids=tuple(d["ids"]), text=d["text"],
                         finish_reason=d["finish"], seed=sd, probs=tuple(d["probs"]),
                         top_ids=tuple(map(tuple, d["top_ids"])) if cfg.trace_top_k else None,
                         top_probs=tuple(map(tuple, d["top_probs"])) if cfg.trace_top_k else None,
                         top_gumbels=tuple(map(tuple, d["top_g"])) if cfg.trace_top_k and d["top_g"] else None)
               for (p, r, sd), d in zip(chunk, rec)]


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
    V = int(lm.model.get_output_embeddings().weight.shape[0])
    keys = noise.token_keys_for(lm.tokenizer, "token_id", vocab_size=V).to(lm.device)
    texts = [chat_text(lm.tokenizer, list(m)) for m in messages_list]
    out: list[str] = []
    for i in range(0, len(texts), batch_size):
        part = texts[i:i + batch_size]
        rec = _generate_batch(lm, part, list(range(len(part))),
                              noise.unit_keys([(f"complete:{j}", 0) for j in range(i, i + len(part))]),
                              [seed] * len(part), cfg, keys)
        out += [d["text"] for d in rec]
    return out


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

    settings = {"models": sorted(names), "dataset_id": dataset.dataset_id,
                "prompt_ids_hash": hashlib.blake2b("\x00".join(pids).encode(), digest_size=8).hexdigest(),
                "system_prompt": system_prompt, "repeats": repeats, "modes": sorted(modes), "seed": seed,
                "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                "max_new_tokens": cfg.max_new_tokens, "record_traces": cfg.record_traces,
                "trace_top_k": cfg.trace_top_k, "key_mode": key_mode}
    run_id = run_id or run_id_for(settings)
    config = {**settings, "models": names, "modes": modes, "batch_size": cfg.batch_size,
              "device": str(device or models_mod.default_device()), "n_prompts": len(prompts)}
    n_units = len(names) * len(prompts) * repeats * len(modes)
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
