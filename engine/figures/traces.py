"""Figures layer of token traces: a result -> Plotly figures.

Token-trace figures: coupled generations token by token (the chosen token's probability and
Gumbel value per step), and where two models' texts first diverge."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from engine.figures.common import AGREE, DISAGREE, PALETTE, empty_figure, layout


def _tok(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return ""
    # Byte-level BPE (GPT-2 style) stores a leading space as 'Ġ' and a newline as 'Ċ';
    # SentencePiece uses '▁'. Show all as visible whitespace marks.
    return (
        str(s).replace("\n", "↵").replace("Ċ", "↵").replace(" ", "·").replace("Ġ", "·").replace("▁", "·")
    )


def _seq(x) -> list:
    """A list from a stored array cell (list, numpy array, None or NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return []
    return list(x)


def _step_layout(steps: pd.DataFrame, step_values: Sequence[int]) -> dict[int, tuple[float, float]]:
    """step -> (left edge, width) on a character axis: each step's column is as wide as its longest
    shown token (at least 2 characters) plus one, so every box holds its whole token."""
    lengths = (
        steps.assign(_n=steps["token_text"].map(lambda t: len(_tok(t)))).groupby("step")["_n"].max()
    )
    out, x = {}, 0.0
    for s in step_values:
        w = max(int(lengths.get(s, 1)), 2) + 1.0
        out[int(s)] = (x, w)
        x += w
    return out


def _trace_hover(
    rec,
    m,
    models: Sequence[str],
    by_step_text: pd.DataFrame,
    by_step_prob: pd.DataFrame,
    names: Mapping[int, str],
) -> str:
    """The hover text of one model's token at one step: the token and its probability, log p + g
    when the Gumbel value is known, the other models' tokens and the top alternatives."""
    st = int(rec.step)
    others = "<br>".join(
        f"  {html.escape(str(om))}: {html.escape(_tok(by_step_text.at[st, om]))} "
        f"(p={by_step_prob.at[st, om]:.3f})"
        for om in models
        if om != m
        and om in by_step_text.columns
        and st in by_step_text.index
        and not pd.isna(by_step_text.at[st, om])
    )
    alts = ""
    top_ids = _seq(getattr(rec, "top_ids", None))
    if top_ids:
        tp = _seq(getattr(rec, "top_probs", None)) or [float("nan")] * len(top_ids)
        # prefer the Gumbel values recomputed from the noise key; else the stored ones
        tg = (
            _seq(getattr(rec, "top_gumbels_recomputed", None))
            or _seq(getattr(rec, "top_gumbels", None))
            or [None] * len(top_ids)
        )
        alts = "<br>top alternatives (p, g, log p + g):<br>" + "<br>".join(
            f"  {html.escape(_tok(names.get(int(i), f'#{int(i)}')))}: p={p:.3f}"
            + (
                f", g={g:.3f}, log p + g={math.log(p) + g:.3f}"
                if g is not None and not pd.isna(g) and p > 0
                else ""
            )
            for i, p, g in list(zip(top_ids, tp, tg))[:8]
        )
    g_chosen = getattr(rec, "gumbel", None)
    g_txt = ""
    if g_chosen is not None and not pd.isna(g_chosen):
        g_txt = f"<br>Gumbel (recomputed from key): {g_chosen:.4f}"
        if float(rec.prob) > 0:
            g_txt += f"<br>log p + g = {math.log(float(rec.prob)) + g_chosen:.4f} (the largest wins)"
    return (
        f"<b>{html.escape(str(m))}</b>, step {st}<br>token: {html.escape(_tok(rec.token_text))} "
        f"(id {int(rec.token_id)})<br>p = {float(rec.prob):.4f}{g_txt}"
        + (f"<br>other models:<br>{others}" if others else "")
        + alts
    )


def trace_figure(
    steps: pd.DataFrame,
    models: Sequence[str],
    agree: Sequence[bool] | None = None,
    first_divergence: int | None = None,
    title: str = "Token trace",
    token_names: Mapping[int, str] | None = None,
    chars_shown: int = 120,
) -> go.Figure:
    """Generations of several models side by side, one row per model, one box per step.

    Each step's boxes are as wide as its longest token, so tokens are shown whole (never cut);
    green where all models chose the same token at that step, red where they differ; a dashed
    line marks the first divergence. Hover: token, its probability in this model, log p + g of
    the chosen token (when its Gumbel value is known), the top alternatives with probabilities
    and Gumbel values.

    Args:
        steps: rows of (model, step, token_id, token_text, prob, top_ids, top_probs, top_gumbels
            [, gumbel]) as from ``engine.analysis.traces.trace_steps`` / ``recompute_gumbels``.
        models: row order (top to bottom).
        agree: per shown step (sorted steps), whether all models agree.
        first_divergence: step index or None.
        token_names: optional id -> text for the alternatives (defaults to ids).
        chars_shown: the initial x range, in characters (drag to pan to the rest); 120
            characters of 12 px monospace fit a chart about 1000 px wide.
    """
    if steps.empty:
        return empty_figure("no token traces stored for this unit")
    step_values = sorted(int(s) for s in steps["step"].unique())
    agree_map = (
        dict(zip(step_values, agree)) if agree is not None and len(agree) == len(step_values) else {}
    )
    by_step_text = steps.pivot_table(index="step", columns="model", values="token_text", aggfunc="first")
    by_step_prob = steps.pivot_table(index="step", columns="model", values="prob", aggfunc="first")
    pos = _step_layout(steps, step_values)
    fig = go.Figure()
    names = dict(token_names or {})
    for m in models:
        part = steps[steps["model"] == m].sort_values("step")
        if part.empty:
            continue
        colors = [AGREE if agree_map.get(int(st), False) else DISAGREE for st in part["step"]]
        hovers = [
            _trace_hover(rec, m, models, by_step_text, by_step_prob, names)
            for rec in part.itertuples(index=False)
        ]
        left = [pos[int(s)][0] for s in part["step"]]
        width = [pos[int(s)][1] for s in part["step"]]
        fig.add_trace(
            go.Bar(
                y=[str(m)] * len(part),
                x=width,
                base=left,
                orientation="h",
                width=0.8,
                marker=dict(color=colors, line=dict(color="#adb5bd", width=1)),
                hovertext=hovers,
                hoverinfo="text",
                name=str(m),
                showlegend=False,
            )
        )
        # the token texts, centred in their boxes (a text trace: never shrunk, moved or cut)
        fig.add_trace(
            go.Scatter(
                y=[str(m)] * len(part),
                x=[x + w / 2 for x, w in zip(left, width)],
                mode="text",
                text=[_tok(t) for t in part["token_text"]],
                textposition="middle center",
                textfont=dict(size=12, family="monospace", color="#212529"),
                hoverinfo="skip",
                showlegend=False,
                name=f"{m} tokens",
            )
        )
    if first_divergence is not None and int(first_divergence) in pos:
        fig.add_vline(
            x=pos[int(first_divergence)][0],
            line=dict(color="#c92a2a", dash="dash", width=2),
            annotation_text=f"first divergence: step {first_divergence}",
            annotation_position="top",
        )
    total = sum(w for _, w in pos.values())
    every = 5 if len(step_values) <= 200 else 20
    ticks = [s for s in step_values if s % every == 0]
    fig.update_xaxes(
        title="step",
        range=[-0.5, min(total, chars_shown) + 0.5],
        showgrid=False,
        zeroline=False,
        tickvals=[pos[s][0] + pos[s][1] / 2 for s in ticks],
        ticktext=[str(s) for s in ticks],
    )
    fig.update_yaxes(autorange="reversed", type="category", fixedrange=True)
    return layout(
        fig,
        title + (" · drag to see later steps" if total > chars_shown else ""),
        height=140 + 55 * len(models),
        hoverlabel=dict(align="left"),
        bargap=0.15,
        dragmode="pan",
    )


def prob_figure(
    steps: pd.DataFrame,
    models: Sequence[str],
    first_divergence: int | None = None,
    title: str = "Probability of the chosen token",
) -> go.Figure:
    """Per step, the probability of the token each model chose (lines, one per model)."""
    if steps.empty:
        return empty_figure("no token traces stored for this unit")
    fig = go.Figure()
    for i, m in enumerate(models):
        part = steps[steps["model"] == m].sort_values("step")
        fig.add_trace(
            go.Scatter(
                x=part["step"],
                y=part["prob"],
                mode="lines+markers",
                name=str(m),
                line=dict(color=PALETTE[i % len(PALETTE)]),
            )
        )
    if first_divergence is not None:
        fig.add_vline(x=first_divergence, line=dict(color="#c92a2a", dash="dash"))
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="p(chosen token)", range=[0, 1.02])
    return layout(fig, title, height=300)


def divergence_figure(
    df: pd.DataFrame, title: str = "First divergence step of the coupled generations"
) -> go.Figure:
    """Histogram of the first step where the models' tokens differ, over a run's units; units that
    never diverge are counted in the title (rows of ``engine.analysis.traces.divergence_summary``)."""
    if df.empty:
        return empty_figure("no coupled traces for these models")
    div = df["first_divergence"].dropna().astype(int)
    never = int(df["first_divergence"].isna().sum())
    fig = go.Figure(
        go.Histogram(
            x=div,
            xbins=dict(start=-0.5, size=1),
            marker_color="#3b5bdb",
            hovertemplate="step %{x}: %{y} units<extra></extra>",
        )
    )
    fig.update_xaxes(title="first step where the tokens differ")
    fig.update_yaxes(title="units (prompt, repeat)")
    return layout(fig, f"{title} · {never} of {len(df)} units never diverge", height=320)
