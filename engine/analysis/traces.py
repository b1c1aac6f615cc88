"""Analysis layer of token traces: stored data -> engine.stats -> a frozen result.

Token traces of one unit: read per unit and page of steps (never a whole trace table), aligned by
step, the divergence of coupled models, and the Gumbel values recomputed from the noise key.

Benz et al., "Evaluation of Large Language Models via Coupled Token Generation", Section 3: coupled
models share the noise of every step, so they agree until their distributions differ enough.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from engine.config import MODES
from engine.errors import UserError
from engine.store import generations as generations_store
from engine.store import runs as runs_store


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte (``bytes_to_unicode`` inverted): printable
    bytes stand for themselves, the others (space, newline, ...) for the characters 256 + i."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


BYTE_LEVEL = _byte_level_alphabet()
_REMAPPED = {c for c in BYTE_LEVEL if ord(c) >= 256}  # 'Ġ' (space), 'Ċ' (newline), ...


def decode_pieces(pieces: Sequence) -> list[str]:
    """The text of tokenizer pieces as stored in ``token_traces.token_text``.

    Byte-level BPE pieces (GPT-2, Llama 3, SmolLM2: ``Ġactually`` for " actually") are mapped back to
    their bytes and decoded as UTF-8 (a character split over two tokens shows as its escaped bytes);
    SentencePiece's ``▁`` is a space and ``<0xNN>`` a byte. The byte-level mapping is used only when
    some piece of the sequence uses a remapped character and none uses ``▁``, so other tokenizers'
    pieces (character-level, already decoded text) come back unchanged.
    """
    texts = ["" if p is None or (isinstance(p, float) and math.isnan(p)) else str(p) for p in pieces]
    byte_level = any(ch in _REMAPPED for t in texts for ch in t) and not any("▁" in t for t in texts)
    out = []
    for t in texts:
        if byte_level and all(ch in BYTE_LEVEL for ch in t):
            out.append(bytes(BYTE_LEVEL[ch] for ch in t).decode("utf-8", errors="backslashreplace"))
        elif t.startswith("<0x") and t.endswith(">") and len(t) == 6:
            out.append(bytes([int(t[3:5], 16)]).decode("utf-8", errors="backslashreplace"))
        else:
            out.append(t.replace("▁", " "))
    return out


def trace_steps(
    db: str | os.PathLike,
    run_id: str,
    prompt_id: str,
    repeat: int,
    mode: str,
    models: list[str],
    max_steps: int = 300,
    step_offset: int = 0,
) -> pd.DataFrame:
    """Token traces of one unit for ``models``, steps [step_offset, step_offset + max_steps):
    model, step, token_id, token_text, prob, top_ids, top_probs, top_gumbels, seed."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(MODES)}")
    if not models:
        return pd.DataFrame(
            columns=[
                "model",
                "step",
                "token_id",
                "token_text",
                "prob",
                "top_ids",
                "top_probs",
                "top_gumbels",
                "seed",
            ]
        )
    df = generations_store.trace_rows(
        db, run_id, prompt_id, repeat, mode, list(models), step_offset, max_steps
    )
    df["token_text"] = decode_pieces(df["token_text"].tolist())  # the text, not tokenizer pieces
    return df


def unit_trace_length(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str) -> int:
    """The longest trace (steps) of one unit over its models (for paging)."""
    return generations_store.trace_length(db, run_id, prompt_id, repeat, mode)


def recompute_gumbels(
    db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, steps: pd.DataFrame
) -> pd.DataFrame | None:
    """Recompute, from the noise key, the Gumbel value of every chosen token in ``steps``.

    Only for runs keyed by token id (shared vocabulary): g = engine.sampling.noise.gumbel(seed,
    unit_key(prompt, repeat), step, token_id). Returns ``steps`` with a ``gumbel`` column, or None when
    the run uses byte-string keys (which need the tokenizer) or engine.sampling.noise is unavailable.
    """
    if steps.empty or runs_store.run_key_mode(db, run_id) not in ("token_id", None):
        return None
    try:
        import torch

        from engine.sampling import noise
    except ImportError:
        return None
    out = steps.copy()
    out["gumbel"] = np.nan
    out["top_gumbels_recomputed"] = None
    ukey = noise.unit_key(str(prompt_id), int(repeat))
    for seed, part in out.groupby("seed", sort=False):
        if seed is None or (isinstance(seed, float) and np.isnan(seed)):
            continue
        tops = [list(t) if t is not None and not isinstance(t, float) else [] for t in part["top_ids"]]
        width = max((len(t) for t in tops), default=0)
        # (S, 1 + K) token ids per step: the chosen token, then its top-K alternatives (padded
        # with the chosen id). Noise is evaluated on the (S, U) grid of the unique ids and
        # gathered, so the cost stays O(S * U) with U small.
        ids = np.array(
            [[c] + t + [c] * (width - len(t)) for c, t in zip(part["token_id"], tops)], dtype=np.int64
        )
        uniq, inv_np = np.unique(ids, return_inverse=True)
        inv = torch.from_numpy(inv_np.reshape(ids.shape))  # (S, 1 + K)
        step_t = torch.tensor(part["step"].to_numpy(dtype=np.int64))  # (S,)
        g = noise.gumbel(
            int(seed), torch.full((len(part),), ukey, dtype=torch.int64), step_t, torch.from_numpy(uniq)
        )  # (S, U)
        picked = g.gather(1, inv).numpy().astype(np.float64)  # (S, 1 + K)
        out.loc[part.index, "gumbel"] = picked[:, 0]
        out.loc[part.index, "top_gumbels_recomputed"] = pd.Series(
            [row[1 : 1 + len(t)].tolist() for row, t in zip(picked, tops)],
            index=part.index,
            dtype=object,
        )
    return out


def gumbel_check(steps: pd.DataFrame) -> float | None:
    """Largest |stored − recomputed| Gumbel value over the alternatives (None if nothing to compare):
    a check that the stored traces and the keyed noise agree."""
    if "top_gumbels_recomputed" not in steps or "top_gumbels" not in steps:
        return None
    diffs = [
        np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)))
        for a, b in zip(steps["top_gumbels"], steps["top_gumbels_recomputed"])
        if a is not None and b is not None and not isinstance(a, float) and len(a) and len(a) == len(b)
    ]
    return float(max(diffs)) if diffs else None


@dataclass(frozen=True)
class Alignment:
    """Several models' traces of one unit aligned by step (:func:`align_traces`)."""

    table: pd.DataFrame  # step, then per model <m> (token text) and <m>:prob, then agree
    agree: list[bool]  # per step: every model generated the same token id
    first_divergence: int | None  # the first step where they differ (None: never, in the shown steps)
    n_agree: int
    n_steps: int


@dataclass(frozen=True)
class DivergenceExplanation:
    """Why two coupled models chose different tokens a (model A) and b (model B) at one step
    (:func:`divergence_explanation`); every field but ``complete`` None when no two models differ
    there."""

    models: tuple[str, str] | None = None
    tokens: tuple[str, str] | None = None  # the two tokens' text
    threshold: float | None = None  # d = g(b) - g(a), the shared noise's preference for b
    log_odds: tuple[float, float] | None = None  # L = log p(a) - log p(b), of A and of B
    margins: tuple[float, float] | None = None  # A's L_A - d, B's d - L_B
    log_odds_shift: float | None = None  # L_A - L_B
    p_a: tuple[float, float] | None = None  # p_A(a), p_B(a)
    probability_shift: float | None = None  # p_A(a) - p_B(a)
    text: str | None = None  # one sentence
    complete: bool = False  # False when a needed value is not among the stored top-K


@dataclass(frozen=True)
class TraceView:
    """Everything the token-trace view draws for one unit and mode (:func:`trace_view`)."""

    steps: pd.DataFrame  # trace rows, decoded text, recomputed Gumbel values where possible
    alignment: Alignment
    gumbel_recomputed: bool
    gumbel_check: float | None  # largest |stored - recomputed| Gumbel value
    length: int  # the unit's longest trace (for paging)
    token_names: dict[int, str]
    temperature: float | None
    decisions: pd.DataFrame | None  # step_decisions at the first divergence
    explanation: DivergenceExplanation | None  # divergence_explanation (coupled mode)


def align_traces(steps: pd.DataFrame, models: list[str]) -> Alignment:
    """Align the traces of several models of one unit by step.

    Returns:
        :class:`Alignment`: ``table`` (one row per step: step, then per model ``<m>`` token text and
        ``<m>:prob``), ``agree`` (bool per step: every model generated the same token id at that
        step), ``first_divergence`` (the first step where they differ, None if never within the
        shown steps), ``n_agree`` and ``n_steps``.
    """
    if steps.empty:
        return Alignment(pd.DataFrame(columns=["step"]), [], None, 0, 0)
    tok = steps.pivot_table(index="step", columns="model", values="token_id", aggfunc="first")
    txt = steps.pivot_table(index="step", columns="model", values="token_text", aggfunc="first")
    prob = steps.pivot_table(index="step", columns="model", values="prob", aggfunc="first")
    present = [m for m in models if m in tok.columns]
    tok = tok.reindex(columns=present)
    agree = (tok.nunique(axis=1, dropna=False) == 1) & tok.notna().all(axis=1)
    table = pd.DataFrame({"step": tok.index})
    for m in present:
        table[m] = txt[m].reindex(tok.index).to_numpy()
        table[f"{m}:prob"] = prob[m].reindex(tok.index).to_numpy()
    table["agree"] = agree.to_numpy()
    first = None if bool(agree.all()) else int(tok.index[~agree.to_numpy()][0])
    return Alignment(table, agree.tolist(), first, int(agree.sum()), int(len(agree)))


def token_names(
    db: str | os.PathLike, run_id: str, steps: pd.DataFrame, limit: int = 2000
) -> dict[int, str]:
    """Text of the alternative token ids shown in ``steps``, looked up among the tokens the run's
    models generated (no tokenizer needed); ids never generated in the run stay unnamed."""
    ids: set[int] = set()
    for col in ("top_ids",):
        if col in steps:
            for v in steps[col]:
                if v is not None and not (isinstance(v, float)):
                    ids.update(int(i) for i in v)
    ids -= set(int(i) for i in steps.get("token_id", []))
    names = {int(i): str(t) for i, t in zip(steps.get("token_id", []), steps.get("token_text", []))}
    if ids:
        found = generations_store.token_pieces(db, run_id, sorted(ids), limit)
        names.update(
            dict(zip((int(i) for i in found["token_id"]), decode_pieces(found["token_text"].tolist())))
        )
    return names


# --------------------------------------------------------------------------- the deciding quantity


def _cells(x) -> list:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return []
    return list(x)


def _num(x) -> float:
    return float("nan") if x is None or pd.isna(x) else float(x)


def _candidates(rec: Mapping, greedy: bool) -> dict[int, tuple[float, float]]:
    """token id -> (log p, g) for the chosen token and the stored top-K alternatives of one
    (model, step) trace row. log p = log(prob) as stored: the probability under the temperature-
    scaled, top-k/top-p masked distribution the sampler drew from (engine.sampling.gumbel.
    masked_logprobs). g: recomputed from the noise key where available, else as stored; 0 when
    greedy (T = 0: no noise). The sampler's float formula is argmax(z + g), z = log p + a constant per
    row: the same argmax, so log p + g explains the choice (up to float32 near-ties)."""
    ids = [int(i) for i in _cells(rec.get("top_ids"))]
    probs = _cells(rec.get("top_probs"))
    gs = _cells(rec.get("top_gumbels_recomputed")) or _cells(rec.get("top_gumbels"))
    out: dict[int, tuple[float, float]] = {}
    for j, i in enumerate(ids):
        p = _num(probs[j]) if j < len(probs) else float("nan")
        g = 0.0 if greedy else (_num(gs[j]) if j < len(gs) else float("nan"))
        out[i] = (math.log(p) if p > 0 else -math.inf, g)
    c = int(rec["token_id"])
    p = _num(rec.get("prob"))
    g_c = 0.0 if greedy else _num(rec.get("gumbel"))
    if math.isnan(g_c):
        g_c = out.get(c, (0.0, float("nan")))[1]
    out[c] = (math.log(p) if p > 0 else -math.inf, g_c)
    return out


def step_decisions(
    steps: pd.DataFrame,
    step: int,
    models: Sequence[str],
    temperature: float | None = None,
    names: Mapping[int, str] | None = None,
) -> pd.DataFrame:
    """The Gumbel-max decision of each model at one step: s(t) = log p(t) + g(t) of the chosen
    token and of the runner-up, and the margin s(chosen) - s(runner-up) > 0.

    Gumbel-max (Benz et al., Section 3) picks argmax_t log p(t) + g(t); the runner-up here is the
    best other token among the K stored alternatives (a token outside the top-K can only be
    runner-up through a large g; it is not stored). Greedy runs (temperature 0) have g = 0.

    Args:
        steps: trace rows (model, step, token_id, token_text, prob, top_ids, top_probs, top_gumbels
            [, gumbel, top_gumbels_recomputed]) as from :func:`trace_view`.
        step: the step (e.g. the first divergence). models: row order.
        temperature: the run's temperature (0 = greedy); None = sampled.
        names: token id -> text for the runner-up (default ``#id``).

    Returns:
        One row per model with a trace at ``step``: model, chosen, chosen_id, logp_chosen, g_chosen,
        s_chosen, runner_up, runner_up_id, logp_runner_up, g_runner_up, s_runner_up, margin,
        consistent (no stored alternative scores above the chosen token: the trace agrees with
        Gumbel-max).
    """
    greedy = temperature is not None and temperature == 0
    names = dict(names or {})
    at = steps[steps["step"] == step]
    for i, t in zip(at["token_id"], at["token_text"]):  # every model's chosen token is named
        names.setdefault(int(i), str(t))
    rows = []
    for m in models:
        part = at[at["model"] == m]
        if part.empty:
            continue
        rec = part.iloc[0].to_dict()
        cand = _candidates(rec, greedy)
        c = int(rec["token_id"])
        score = {i: lp + g for i, (lp, g) in cand.items()}
        others = {i: v for i, v in score.items() if i != c and not math.isnan(v)}
        r = max(others, key=lambda i: (others[i], -i)) if others else None
        lp_c, g_c = cand[c]
        lp_r, g_r = cand[r] if r is not None else (float("nan"), float("nan"))
        s_c, s_r = lp_c + g_c, lp_r + g_r
        rows.append(
            {
                "model": m,
                "chosen": names.get(c, f"#{c}"),
                "chosen_id": c,
                "logp_chosen": lp_c,
                "g_chosen": g_c,
                "s_chosen": s_c,
                "runner_up": None if r is None else names.get(r, f"#{r}"),
                "runner_up_id": r,
                "logp_runner_up": lp_r,
                "g_runner_up": g_r,
                "s_runner_up": s_r,
                "margin": s_c - s_r,
                "consistent": bool(math.isnan(s_c) or not others or s_c >= max(others.values())),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "model",
            "chosen",
            "chosen_id",
            "logp_chosen",
            "g_chosen",
            "s_chosen",
            "runner_up",
            "runner_up_id",
            "logp_runner_up",
            "g_runner_up",
            "s_runner_up",
            "margin",
            "consistent",
        ],
    )


def divergence_explanation(
    steps: pd.DataFrame,
    step: int,
    models: Sequence[str],
    temperature: float | None = None,
    names: Mapping[int, str] | None = None,
) -> DivergenceExplanation:
    """Why two coupled models chose different tokens a (model A) and b (model B) at ``step``.

    Both share the noise, so each picks a over b iff its log-odds L = log p(a) - log p(b)
    exceeds the noise threshold d = g(b) - g(a). A's margin is L_A - d, B's is d - L_B; the
    shift L_A - L_B between the models crossed the threshold. In probabilities: p(a) moved from
    p_A(a) to p_B(a).

    Returns:
        :class:`DivergenceExplanation`: ``models`` (A, B), ``tokens`` (a, b), ``threshold`` d,
        ``log_odds`` (L_A, L_B), ``margins`` (A's, B's), ``log_odds_shift`` L_A - L_B, ``p_a``
        (p_A(a), p_B(a)), ``probability_shift`` p_A(a) - p_B(a), ``text`` (one sentence) and
        ``complete`` (False when a probability or Gumbel value is not among the stored top-K; the
        text then says so); None-valued fields when no two models differ at ``step``.
    """
    greedy = temperature is not None and temperature == 0
    names = dict(names or {})
    at = steps[steps["step"] == step]
    recs = {m: at[at["model"] == m].iloc[0].to_dict() for m in models if (at["model"] == m).any()}
    pair = next(
        (
            (x, y)
            for i, x in enumerate(recs)
            for y in list(recs)[i + 1 :]
            if int(recs[x]["token_id"]) != int(recs[y]["token_id"])
        ),
        None,
    )
    if pair is None:
        return DivergenceExplanation()
    A, B = pair
    a, b = int(recs[A]["token_id"]), int(recs[B]["token_id"])
    for m in (A, B):
        names.setdefault(int(recs[m]["token_id"]), str(recs[m].get("token_text")))
    cand = {m: _candidates(recs[m], greedy) for m in (A, B)}
    nan = float("nan")

    def lp(m, t):
        return cand[m].get(t, (nan, nan))[0]

    def g(t):  # the noise is shared: take it from whichever model stored it
        vals = [cand[m][t][1] for m in (A, B) if t in cand[m] and not math.isnan(cand[m][t][1])]
        return vals[0] if vals else nan

    d = g(b) - g(a)
    L = {m: lp(m, a) - lp(m, b) for m in (A, B)}
    margins = (L[A] - d, d - L[B])
    p_a = (math.exp(lp(A, a)), math.exp(lp(B, a)))
    shift = p_a[0] - p_a[1]
    complete = all(math.isfinite(v) for v in (d, L[A], L[B]))
    ta, tb = names.get(a, f"#{a}"), names.get(b, f"#{b}")
    if complete and min(margins) < 0:
        text = (
            f"At step {step} {A} picks {ta!r} and {B} picks {tb!r}, but the stored probabilities and "
            f"Gumbel values do not reproduce these choices (margins {margins[0]:.3g}, "
            f"{margins[1]:.3g}): the trace was not produced with this noise key (imported or synthetic "
            "data?)."
        )
    elif complete:
        text = (
            f"At step {step} the shared noise favours {tb!r} over {ta!r} by g({tb}) - g({ta}) = {d:.3g}"
            + (" (greedy: no noise)" if greedy else "")
            + ". "
            f"{A} gives {ta!r} log-odds {L[A]:.3g} over {tb!r} (p {math.exp(lp(A, a)):.3g} vs "
            f"{math.exp(lp(A, b)):.3g}) and picks {ta!r} by a margin of {margins[0]:.3g}; {B}'s "
            f"log-odds {L[B]:.3g} (p {math.exp(lp(B, a)):.3g} vs {math.exp(lp(B, b)):.3g}) fall "
            f"{margins[1]:.3g} short, so it picks {tb!r}. A probability shift of {abs(shift):.3g} in "
            f"p({ta}) (log-odds shift {L[A] - L[B]:.3g}) crossed a margin of {min(margins):.3g}."
        )
    else:
        missing = [f"p_{m}({t})" for m in (A, B) for t, tt in ((a, ta), (b, tb)) if math.isnan(lp(m, t))]
        missing = [x.replace(f"({a})", f"({ta})").replace(f"({b})", f"({tb})") for x in missing]
        missing += [f"g({tt})" for t, tt in ((a, ta), (b, tb)) if math.isnan(g(t))]
        text = (
            f"At step {step} {A} picks {ta!r} and {B} picks {tb!r}; the comparison needs "
            f"{', '.join(missing)}, which are not among the stored top-K alternatives (store more with "
            "--trace-top-k). Each model's own margin over its runner-up is in the table."
        )
    return DivergenceExplanation(
        models=(A, B),
        tokens=(ta, tb),
        threshold=d,
        log_odds=(L[A], L[B]),
        margins=margins,
        log_odds_shift=L[A] - L[B],
        p_a=p_a,
        probability_shift=shift,
        text=text,
        complete=complete,
    )


def trace_view(
    db: str | os.PathLike,
    run_id: str,
    prompt_id: str,
    repeat: int,
    mode: str,
    models: tuple[str, ...],
    step_offset: int = 0,
    max_steps: int = 120,
) -> TraceView:
    """Everything the token-trace view draws for one unit and mode: the steps (decoded text, with
    recomputed Gumbel values where possible), the alignment, the total trace length, and at the
    first divergence each model's decision and (coupled) why they differ."""
    steps = trace_steps(
        db, run_id, prompt_id, repeat, mode, list(models), max_steps=max_steps, step_offset=step_offset
    )
    with_g = recompute_gumbels(db, run_id, prompt_id, repeat, steps)
    al = align_traces(steps, list(models))
    shown = with_g if with_g is not None else steps
    names = token_names(db, run_id, steps)
    temperature = _run_temperature(db, run_id)
    first = al.first_divergence
    return TraceView(
        steps=shown,
        alignment=al,
        gumbel_recomputed=with_g is not None,
        gumbel_check=gumbel_check(with_g) if with_g is not None else None,
        length=unit_trace_length(db, run_id, prompt_id, repeat, mode),
        token_names=names,
        temperature=temperature,
        decisions=None
        if first is None
        else step_decisions(shown, first, list(models), temperature, names),
        explanation=None
        if first is None or mode != "coupled"
        else divergence_explanation(shown, first, list(models), temperature, names),
    )


def _run_temperature(db, run_id: str) -> float | None:
    """The run's sampling temperature from its stored config (None when unknown)."""
    conf = runs_store.run_config_text(db, run_id)
    if conf is None:
        return None
    t = json.loads(conf).get("temperature")
    return None if t is None else float(t)


def divergence_summary(
    db: str | os.PathLike, run_id: str, models: tuple[str, ...], mode: str = "coupled"
) -> pd.DataFrame:
    """Per unit (prompt_id, repeat) of a run: the first step where the chosen models' tokens differ
    (or one of them has stopped), NULL when they never differ, and the longest trace length.
    Aggregated in SQL (one pass over the run's traces, nothing loaded per token)."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(MODES)}")
    if len(models) < 2:
        raise UserError(f"choose at least two models to compare, got {list(models)}")
    return generations_store.first_divergences(db, run_id, list(models), mode)
