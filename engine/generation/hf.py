"""Our transformers generation loop: batched coupled / independent decoding with keyed Gumbel noise.

The hot loop (:func:`_stream`) is one screen with numbered phases, nanoGPT-style:

1. tokenize   chat template + system prompt (:mod:`.prompts`), longest prompts first
2. prefill    each *unique* prompt once, after a prefix shared by all prompts (:mod:`.hf_prefill`);
              its repeats (and both modes) copy its KV rows
3. decode     keyed noise -> Gumbel-max -> next token; per-row stop at EOS or max_new_tokens; rows
              join and leave as the batching strategy says (:mod:`.hf_batch`: continuous batching
              on preallocated KV buffers (:mod:`.hf_kv`), or static batches for caches that cannot
              be re-packed), chosen once per stream
4. detokenize token ids -> text (special tokens skipped)

Coupling lives entirely in the noise key (engine.sampling.noise): a row's noise depends on (seed, prompt
id, repeat, step, token key) and nothing else, so a unit generated alone, inside any batch, or joining a
running batch late draws the same noise. Numerically, padding changes the shapes of the matmuls, so
logits can differ in the last float bits between batch compositions; the chosen token only changes if two
candidates are within that rounding of each other (tests check identity on the tiny model and on
SmolLM2).

The resumable job on top (run id, vocabulary check, store writes) is :mod:`engine.generation.run`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from engine.errors import UserError
from engine.generation.hf_batch import BatchState, Continuous, Row, Static
from engine.generation.hf_kv import PreallocLayer as _PreallocLayer  # noqa: F401  (tests patch it here)
from engine.generation.hf_prefill import PrefillCache
from engine.generation.hf_prefill import common_prefix as _common_prefix  # noqa: F401
from engine.generation.prompts import chat_text, group_units, prompt_messages, stop_token_ids
from engine.generation.types import GenConfig, GenResult, Unit, as_units
from engine.sampling import noise


def _forward(model, **kw):
    """One model call (a seam for tests that simulate running out of memory)."""
    return model(use_cache=True, **kw)


@torch.inference_mode()
def _stream(
    lm,
    texts: dict[str, str],
    pending: list[Unit],
    cfg: GenConfig,
    token_keys: torch.Tensor,
    batch_size: int,
) -> Iterator[list[Row]]:
    """Decode ``pending`` units, grouped by prompt, up to ``batch_size``
    rows at once; yields the rows that finish at each step."""
    model, tok, dev = lm.model, lm.tokenizer, lm.device
    todo = list(pending)
    if not todo:
        return
    # 1. tokenize; longest prompts first (a stable sort keeps each prompt's units together): rows
    # of similar length share the batch, so less left padding is prefilled and read
    tok_ids = {
        p: tok(texts[p], add_special_tokens=False)["input_ids"]
        for p in dict.fromkeys(u[0] for u in todo)
    }
    todo.sort(key=lambda u: -len(tok_ids[u[0]]))
    # 2. prefill: the first calls tell whether the cache can be re-packed: the strategy, chosen once
    pre = PrefillCache(
        lambda **kw: _forward(model, **kw),
        tok_ids,
        tok.pad_token_id if tok.pad_token_id is not None else 0,
        dev,
        Counter(p for p, _, _ in todo),
    )
    continuous = pre.probe([p for p, _, _ in todo[:batch_size]])
    strategy = (Continuous if continuous else Static)(pre, batch_size)
    st = BatchState(cfg, token_keys, torch.tensor(sorted(stop_token_ids(lm)) or [-1], device=dev), dev)
    while True:
        strategy.admit(st, todo)  # units join (prefilled on demand), finished rows leave
        if not st.rows:
            return
        # 3. decode: keyed noise -> Gumbel-max -> next token, per-row step (rows joined at different
        #    times)
        nxt, finished = st.sample(torch.arange(len(st.rows), device=dev))  # (b,)
        if finished:
            yield finished
            if joined_done := strategy.refill(st, todo, nxt):  # freed rows taken at once
                yield joined_done
        if not bool(st.live.any()):
            st.clear()
            continue
        st.last_pos, st.lens = st.last_pos + 1, st.lens + 1  # (b,)
        out = _forward(
            model,
            input_ids=nxt[:, None],
            attention_mask=strategy.attention_mask(st),
            position_ids=st.last_pos[:, None],
            past_key_values=st.cache,
        )
        st.logits = out.logits[:, -1, :].float()  # (b, V) float32 once


def _detok(lm, rows: list[Row], stop_ids: set[int]) -> list[str]:
    """4. detokenize (the stop token is kept in token_ids/traces, not in the text)."""
    return lm.tokenizer.batch_decode(
        [[t for t in r.ids if t not in stop_ids] for r in rows], skip_special_tokens=True
    )


def _is_oom(exc: BaseException) -> bool:
    oom: Any = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, oom) or "out of memory" in str(exc).lower()


def stream_units(
    lm,
    prompts: dict[str, str] | Sequence,
    units: Sequence[Unit],
    cfg: GenConfig,
    token_keys: torch.Tensor | None = None,
    system_prompt: str | None = None,
) -> Iterator[list[GenResult]]:
    """Generate ``units`` with continuous batching, yielding completed results in chunks of about
    ``cfg.batch_size`` (list of GenResult, in completion order).

    Units are grouped by prompt so that the repeats of a prompt share one prefill (and so do a
    run's coupled and independent units of one prompt: each unit carries its own seed). On CUDA
    out-of-memory the batch size is halved and the unfinished units are generated again (nothing
    is lost: a unit is only yielded when complete, and its result does not depend on the batch).

    Args:
        lm: a models.LoadedModel (or any object with .model, .tokenizer, .device).
        prompts: prompt_id -> user prompt string, or a sequence of objects with .prompt_id and
            .user_prompt (datasets.Prompt).
        units: the :class:`~engine.generation.types.Unit` s (prompt_id, repeat, seed) to generate.
        token_keys: LongTensor (V,) (default: token ids over the model's logit width).
        system_prompt: prepended as a system message when given.
    """
    prompts, todo = group_units(prompts, units)
    V = int(lm.model.get_output_embeddings().weight.shape[0])  # the logits' width
    if token_keys is None:
        token_keys = noise.token_keys_for(lm.tokenizer, "token_id", vocab_size=V)
    token_keys = token_keys.to(lm.device)
    if token_keys.shape[0] != V:
        raise UserError(
            f"token_keys has {token_keys.shape[0]} entries but the model's logits are {V} wide"
        )
    texts = {
        p: chat_text(lm.tokenizer, prompt_messages(prompts[p], system_prompt))
        for p in dict.fromkeys(u[0] for u in todo)
    }
    stop_ids = stop_token_ids(lm)
    bs, buf, done = cfg.batch_size, [], set()
    while todo:
        try:
            for rows in _stream(lm, texts, todo, cfg, token_keys, bs):
                for row, text in zip(rows, _detok(lm, rows, stop_ids)):
                    p, r, sd = row.unit
                    done.add(row.unit)
                    buf.append(
                        GenResult(
                            prompt_id=p,
                            repeat=r,
                            token_ids=tuple(row.ids),
                            text=text,
                            finish_reason=row.finish,
                            seed=sd,
                            probs=tuple(row.probs),
                            top_ids=tuple(map(tuple, row.top_ids)) if cfg.trace_top_k else None,
                            top_probs=tuple(map(tuple, row.top_probs)) if cfg.trace_top_k else None,
                            top_gumbels=tuple(map(tuple, row.top_g))
                            if cfg.trace_top_k and row.top_g
                            else None,
                        )
                    )
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


def iter_generate(
    lm,
    prompts: dict[str, str] | Sequence,
    units: Sequence[tuple[str, int]],
    seed: int | Sequence[int],
    cfg: GenConfig,
    token_keys: torch.Tensor | None = None,
    system_prompt: str | None = None,
) -> Iterator[list[GenResult]]:
    """:func:`stream_units` for (prompt_id, repeat) pairs and one noise seed (shared by all models
    in coupled mode), or one seed per pair."""
    return stream_units(lm, prompts, as_units(units, seed), cfg, token_keys, system_prompt)


def generate_units(
    lm,
    prompts,
    units: Sequence[tuple[str, int]],
    seed: int | Sequence[int],
    cfg: GenConfig = GenConfig(),
    token_keys: torch.Tensor | None = None,
    system_prompt: str | None = None,
) -> list[GenResult]:
    """All units generated (batched), returned in the order of ``units``: (prompt_id, repeat) pairs
    with one seed, or one per pair (see :func:`iter_generate`)."""
    todo = as_units(units, seed)
    got = {
        r.unit: r
        for chunk in stream_units(lm, prompts, todo, cfg, token_keys, system_prompt)
        for r in chunk
    }
    return [got[u] for u in todo]


def complete(
    lm,
    messages_list: Sequence[list[dict]],
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    seed: int = 0,
    batch_size: int = 16,
) -> list[str]:
    """Generate one reply per chat (``[{"role", "content"}, ...]``); greedy by default.

    Used by the LLM judge and entailment clustering. With temperature > 0 the noise is keyed by
    the chat's index in ``messages_list`` (repeat 0), so results are reproducible for a seed.
    """
    cfg = GenConfig(
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        trace_top_k=0,
        record_traces=False,
    )
    ids = [f"complete:{j}" for j in range(len(messages_list))]
    texts = {pid: chat_text(lm.tokenizer, list(m)) for pid, m in zip(ids, messages_list)}
    V = int(lm.model.get_output_embeddings().weight.shape[0])
    keys = noise.token_keys_for(lm.tokenizer, "token_id", vocab_size=V).to(lm.device)
    out: dict[str, str] = {}
    stop_ids = stop_token_ids(lm)
    for rows in _stream(lm, texts, [Unit(pid, 0, seed) for pid in ids], cfg, keys, batch_size):
        out.update((row.unit[0], t) for row, t in zip(rows, _detok(lm, rows, stop_ids)))
    return [out[pid] for pid in ids]


class HFBackend:
    """Our transformers loop behind the :class:`~engine.generation.types.Backend` interface."""

    def __init__(self, lm):
        self.lm, self.name, self.tokenizer = lm, lm.name, lm.tokenizer
        self.vocab_size, self.device, self.vocab_id = lm.vocab_size, lm.device, lm.vocab_id

    def generate(
        self,
        prompts,
        units: Sequence[Unit],
        cfg: GenConfig,
        token_keys: torch.Tensor | None = None,
        system_prompt: str | None = None,
    ) -> Iterator[list[GenResult]]:
        return stream_units(self.lm, prompts, units, cfg, token_keys, system_prompt)

    def describe(self) -> dict[str, Any]:
        import transformers

        return {
            "backend": "hf",
            "backend_version": str(transformers.__version__),
            "dtype": str(getattr(self.lm, "dtype", next(self.lm.model.parameters()).dtype)).removeprefix(
                "torch."
            ),
            "device": str(self.device),
        }

    def record(self) -> dict[str, Any]:
        return self.lm.record()

    def close(self) -> None:
        self.lm = None
