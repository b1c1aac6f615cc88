"""Presentation: Plotly figure builders for the dashboard and the CLI: plain data in, ``go.Figure`` out.
No database access, no statistics: every builder draws values an engine function already computed.
Pages call one builder per chart, so the same figures can be exported (``dashboard.downloads``),
written by the CLI (:func:`write_benchmark_figures`) or rebuilt outside Streamlit."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

COLORS = {"coupled": "#3b5bdb", "independent": "#e8590c"}
PALETTE = ["#3b5bdb", "#e8590c", "#2b8a3e", "#ae3ec9", "#c92a2a", "#1098ad", "#f08c00", "#5c940d",
           "#495057", "#d6336c", "#364fc7", "#087f5b"]
AGREE, DISAGREE, MISSING = "#b2f2bb", "#ffc9c9", "#e9ecef"
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=50), font=dict(size=13))


def _layout(fig: go.Figure, title: str, **kw) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.0, xanchor="left"), **LAYOUT, **kw)
    return fig


def empty_figure(message: str) -> go.Figure:
    """A blank figure carrying a message (used when there is nothing to draw)."""
    fig = go.Figure()
    fig.add_annotation(text=html.escape(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(xaxis_visible=False, yaxis_visible=False)
    return _layout(fig, "", height=200)


# --------------------------------------------------------------------------- token traces

def _tok(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return ""
    # Byte-level BPE (GPT-2 style) stores a leading space as 'Ġ' and a newline as 'Ċ';
    # SentencePiece uses '▁'. Show all as visible whitespace marks.
    return (str(s).replace("\n", "↵").replace("Ċ", "↵").replace(" ", "·").replace("Ġ", "·")
            .replace("▁", "·"))


def _seq(x) -> list:
    """A list from a stored array cell (list, numpy array, None or NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return []
    return list(x)


def _step_layout(steps: pd.DataFrame, step_values: Sequence[int]) -> dict[int, tuple[float, float]]:
    """step -> (left edge, width) on a character axis: each step's column is as wide as its longest
    shown token (at least 2 characters) plus one, so every box holds its whole token."""
    lengths = steps.assign(_n=steps["token_text"].map(lambda t: len(_tok(t)))).groupby("step")["_n"].max()
    out, x = {}, 0.0
    for s in step_values:
        w = max(int(lengths.get(s, 1)), 2) + 1.0
        out[int(s)] = (x, w)
        x += w
    return out


def _trace_hover(rec, m, models: Sequence[str], by_step_text: pd.DataFrame, by_step_prob: pd.DataFrame,
                 names: Mapping[int, str]) -> str:
    """The hover text of one model's token at one step: the token and its probability, log p + g
    when the Gumbel value is known, the other models' tokens and the top alternatives."""
    st = int(rec.step)
    others = "<br>".join(
        f"  {html.escape(str(om))}: {html.escape(_tok(by_step_text.at[st, om]))} "
        f"(p={by_step_prob.at[st, om]:.3f})"
        for om in models if om != m and om in by_step_text.columns and st in by_step_text.index
        and not pd.isna(by_step_text.at[st, om]))
    alts = ""
    top_ids = _seq(getattr(rec, "top_ids", None))
    if top_ids:
        tp = _seq(getattr(rec, "top_probs", None)) or [float("nan")] * len(top_ids)
        # prefer the Gumbel values recomputed from the noise key; else the stored ones
        tg = _seq(getattr(rec, "top_gumbels_recomputed", None)) or _seq(getattr(rec, "top_gumbels", None)) \
            or [None] * len(top_ids)
        alts = "<br>top alternatives (p, g, log p + g):<br>" + "<br>".join(
            f"  {html.escape(_tok(names.get(int(i), f'#{int(i)}')))}: p={p:.3f}"
            + (f", g={g:.3f}, log p + g={math.log(p) + g:.3f}" if g is not None and not pd.isna(g) and p > 0
               else "")
            for i, p, g in list(zip(top_ids, tp, tg))[:8])
    g_chosen = getattr(rec, "gumbel", None)
    g_txt = ""
    if g_chosen is not None and not pd.isna(g_chosen):
        g_txt = f"<br>Gumbel (recomputed from key): {g_chosen:.4f}"
        if float(rec.prob) > 0:
            g_txt += f"<br>log p + g = {math.log(float(rec.prob)) + g_chosen:.4f} (the largest wins)"
    return (f"<b>{html.escape(str(m))}</b>, step {st}<br>token: {html.escape(_tok(rec.token_text))} "
            f"(id {int(rec.token_id)})<br>p = {float(rec.prob):.4f}{g_txt}"
            + (f"<br>other models:<br>{others}" if others else "") + alts)


def trace_figure(steps: pd.DataFrame, models: Sequence[str], agree: Sequence[bool] | None = None,
                 first_divergence: int | None = None, title: str = "Token trace",
                 token_names: Mapping[int, str] | None = None, chars_shown: int = 120) -> go.Figure:
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
    agree_map = dict(zip(step_values, agree)) if agree is not None and len(agree) == len(step_values) else {}
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
        hovers = [_trace_hover(rec, m, models, by_step_text, by_step_prob, names)
                  for rec in part.itertuples(index=False)]
        left = [pos[int(s)][0] for s in part["step"]]
        width = [pos[int(s)][1] for s in part["step"]]
        fig.add_trace(go.Bar(
            y=[str(m)] * len(part), x=width, base=left, orientation="h", width=0.8,
            marker=dict(color=colors, line=dict(color="#adb5bd", width=1)),
            hovertext=hovers, hoverinfo="text", name=str(m), showlegend=False))
        # the token texts, centred in their boxes (a text trace: never shrunk, moved or cut)
        fig.add_trace(go.Scatter(
            y=[str(m)] * len(part), x=[x + w / 2 for x, w in zip(left, width)], mode="text",
            text=[_tok(t) for t in part["token_text"]], textposition="middle center",
            textfont=dict(size=12, family="monospace", color="#212529"), hoverinfo="skip", showlegend=False,
            name=f"{m} tokens"))
    if first_divergence is not None and int(first_divergence) in pos:
        fig.add_vline(x=pos[int(first_divergence)][0], line=dict(color="#c92a2a", dash="dash", width=2),
                      annotation_text=f"first divergence: step {first_divergence}", annotation_position="top")
    total = sum(w for _, w in pos.values())
    every = 5 if len(step_values) <= 200 else 20
    ticks = [s for s in step_values if s % every == 0]
    fig.update_xaxes(title="step", range=[-0.5, min(total, chars_shown) + 0.5], showgrid=False, zeroline=False,
                     tickvals=[pos[s][0] + pos[s][1] / 2 for s in ticks], ticktext=[str(s) for s in ticks])
    fig.update_yaxes(autorange="reversed", type="category", fixedrange=True)
    return _layout(fig, title + (" · drag to see later steps" if total > chars_shown else ""),
                   height=140 + 55 * len(models), hoverlabel=dict(align="left"), bargap=0.15, dragmode="pan")


def prob_figure(steps: pd.DataFrame, models: Sequence[str], first_divergence: int | None = None,
                title: str = "Probability of the chosen token") -> go.Figure:
    """Per step, the probability of the token each model chose (lines, one per model)."""
    if steps.empty:
        return empty_figure("no token traces stored for this unit")
    fig = go.Figure()
    for i, m in enumerate(models):
        part = steps[steps["model"] == m].sort_values("step")
        fig.add_trace(go.Scatter(x=part["step"], y=part["prob"], mode="lines+markers", name=str(m),
                                 line=dict(color=PALETTE[i % len(PALETTE)])))
    if first_divergence is not None:
        fig.add_vline(x=first_divergence, line=dict(color="#c92a2a", dash="dash"))
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="p(chosen token)", range=[0, 1.02])
    return _layout(fig, title, height=300)


# --------------------------------------------------------------------------- benchmark

def kde_figure(curves: Mapping[str, Any], markers: Mapping[str, float | None] | None = None, title: str = "",
               xaxis: str = "", marker_label: str = "mean") -> go.Figure:
    """Density curves (``{label: curve}``, each an ``engine.analysis.stats_records.KdeCurve`` read by
    attribute: x, density, lower) with dashed vertical markers.

    Curves with a ``lower`` bound (a boundary-corrected KDE, e.g. of a variance) start the x axis there.
    """
    fig = go.Figure()
    for i, (label, c) in enumerate(curves.items()):
        color = COLORS.get(label, PALETTE[i % len(PALETTE)])
        fig.add_trace(go.Scatter(x=c.x, y=c.density, mode="lines", name=label, fill="tozeroy",
                                 line=dict(color=color, width=2), opacity=0.6))
        mark = markers.get(label) if markers else None
        if mark is not None:
            v = float(mark)
            fig.add_vline(x=v, line=dict(color=color, dash="dash", width=2))
            # one label per marker, stacked so that close markers do not overprint each other
            fig.add_annotation(x=v, y=1.0 - 0.09 * i, xref="x", yref="paper", showarrow=False, xanchor="left",
                               xshift=4, font=dict(color=color), bgcolor="rgba(255,255,255,0.8)",
                               text=f"{marker_label} {label}: {v:.3f}" if len(curves) > 1 else f"{marker_label} = {v:.3f}")
    fig.update_xaxes(title=xaxis)
    lowers = [c.lower for c in curves.values()]
    if curves and all(lo is not None for lo in lowers):
        fig.update_xaxes(range=[min(float(lo) for lo in lowers if lo is not None),
                                max(max(c.x) for c in curves.values())])
    fig.update_yaxes(title="density")
    return _layout(fig, title, height=360, legend=dict(orientation="h", y=-0.2))


def error_curve_figure(rows: Sequence[Mapping], target_error: float | None = None,
                       saving: Any = None, title: str = "Estimation error vs number of samples") -> go.Figure:
    """Mean absolute error of the estimated difference vs n, per mode, with its band; ``saving`` (a
    ``SavingAt``: n_coupled, n_independent) marks where each curve reaches ``target_error``."""
    df = pd.DataFrame(rows)
    fig = go.Figure()
    for mode in ("coupled", "independent"):
        if mode not in df or df[mode].isna().all():
            continue
        c = COLORS[mode]
        if f"{mode}_low" in df:
            fig.add_trace(go.Scatter(x=list(df["n"]) + list(df["n"][::-1]),
                                     y=list(df[f"{mode}_high"]) + list(df[f"{mode}_low"][::-1]),
                                     fill="toself", fillcolor=c, opacity=0.15, line=dict(width=0),
                                     hoverinfo="skip", name=f"{mode} 95% band", showlegend=False))
        fig.add_trace(go.Scatter(x=df["n"], y=df[mode], mode="lines", name=mode, line=dict(color=c, width=2)))
    if target_error is not None:
        fig.add_hline(y=target_error, line=dict(color="#495057", dash="dot"),
                      annotation_text=f"error {target_error:.4f}", annotation_position="top right")
    if saving:
        for mode, key in (("coupled", "n_coupled"), ("independent", "n_independent")):
            n = getattr(saving, key)
            if n is not None and target_error is not None:
                fig.add_trace(go.Scatter(x=[n], y=[target_error], mode="markers", marker=dict(color=COLORS[mode], size=10),
                                         name=f"n {mode} = {n:.0f}"))
    fig.update_xaxes(title="number of samples (question, repeat)")
    fig.update_yaxes(title="|estimated − true difference|")
    return _layout(fig, title, height=380, legend=dict(orientation="h", y=-0.25))


def interval_figure(labels: Sequence[str], values: Sequence[float], lows: Sequence[float],
                    highs: Sequence[float], groups: Sequence[str] | None = None, title: str = "",
                    yaxis: str = "", horizontal_line: float | None = None) -> go.Figure:
    """Points (or bars) with confidence intervals, optionally grouped (e.g. by mode)."""
    df = pd.DataFrame({"label": list(labels), "v": list(values), "lo": list(lows), "hi": list(highs),
                       "g": list(groups) if groups is not None else [""] * len(labels)})
    fig = go.Figure()
    for i, (g, part) in enumerate(df.groupby("g", sort=False)):
        color = COLORS.get(g, PALETTE[i % len(PALETTE)])
        fig.add_trace(go.Bar(x=part["label"], y=part["v"], name=g or yaxis, marker_color=color,
                             error_y=dict(type="data", symmetric=False, array=part["hi"] - part["v"],
                                          arrayminus=part["v"] - part["lo"]),
                             hovertemplate="%{x}: %{y:.4f}<extra>" + (g or "") + "</extra>"))
    if horizontal_line is not None:
        fig.add_hline(y=horizontal_line, line=dict(color="#495057", dash="dot"))
    fig.update_yaxes(title=yaxis)
    return _layout(fig, title, height=360, barmode="group", showlegend=groups is not None,
                   legend=dict(orientation="h", y=-0.2))


# --------------------------------------------------------------------------- win-rates

def heatmap_figure(matrix, models: Sequence[str], title: str = "Win-rate of row over column",
                   counts=None, zmin: float = 0.0, zmax: float = 1.0, colorscale: str = "RdBu") -> go.Figure:
    """A (k, k) matrix as a heatmap with values written in the cells (NaN cells left blank)."""
    M = np.asarray(matrix, dtype=float)
    text = [["" if np.isnan(v) else f"{v:.2f}" for v in row] for row in M]
    hover = [[f"{models[i]} vs {models[j]}: " + ("n/a" if np.isnan(M[i, j]) else f"{M[i, j]:.3f}")
              + (f" (n={int(counts[i][j])})" if counts is not None else "")
              for j in range(len(models))] for i in range(len(models))]
    fig = go.Figure(go.Heatmap(z=M, x=list(models), y=list(models), zmin=zmin, zmax=zmax, colorscale=colorscale,
                               text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text"))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, height=160 + 45 * len(models))


def pair_bars_figure(pairs: pd.DataFrame, groups: Sequence[str] | None = None,
                     title: str = "Per-pair win-rate (95% CI)") -> go.Figure:
    """Bars per ordered pair, one per group, with the CIs as error bars (columns pair, <g>, <g>_low,
    <g>_high per group; optional stars: drawn above the pair when two groups were compared)."""
    groups = list(groups) if groups is not None else [g for g in ("coupled", "independent") if g in pairs]
    fig = go.Figure()
    for i, g in enumerate(groups):
        err = None
        if f"{g}_low" in pairs and f"{g}_high" in pairs:
            v = pairs[g].astype(float)
            err = dict(type="data", symmetric=False, array=(pairs[f"{g}_high"].astype(float) - v).clip(lower=0),
                       arrayminus=(v - pairs[f"{g}_low"].astype(float)).clip(lower=0))
        fig.add_trace(go.Bar(x=pairs["pair"], y=pairs[g], name=g, error_y=err,
                             marker_color=COLORS.get(g, PALETTE[i % len(PALETTE)])))
    if "stars" in pairs and len(groups) > 1:
        top = pd.concat([pairs[f"{g}_high"] if f"{g}_high" in pairs else pairs[g] for g in groups], axis=1).max(axis=1)
        for x, y, s in zip(pairs["pair"], top, pairs["stars"]):
            if s:
                fig.add_annotation(x=x, y=y, text=s, showarrow=False, yshift=12)
    fig.update_yaxes(title="win-rate", range=[0, 1.1])
    return _layout(fig, title, height=400, barmode="group", showlegend=len(groups) > 1,
                   legend=dict(orientation="h", y=-0.3))


# --------------------------------------------------------------------------- rank-sets

def rankset_dots_figure(prob, models: Sequence[str], title: str = "P(rank position in rank-set)") -> go.Figure:
    """Dot plot: for each model (y) and rank position (x), dot size = probability (PPR paper, Fig. 3)."""
    P = np.asarray(prob, dtype=float)  # (k, k)
    k = P.shape[0]
    rows, ranks = (a.tolist() for a in np.nonzero(P > 0))  # row-major: each model's positions in rank order
    ss = P[rows, ranks].tolist()
    hv = [f"{models[i]}, rank {r + 1}: {p:.3f}" for i, r, p in zip(rows, ranks, ss)]
    fig = go.Figure(go.Scatter(x=[r + 1 for r in ranks], y=[models[i] for i in rows], mode="markers", hovertext=hv,
                               hoverinfo="text", marker=dict(size=[4 + 26 * s for s in ss], color=ss, colorscale="Blues",
                                                             cmin=0, cmax=1, line=dict(color="#364fc7", width=1),
                                                             colorbar=dict(title="P"))))
    fig.update_xaxes(title="rank position (1 = best)", dtick=1, range=[0.5, k + 0.5])
    fig.update_yaxes(autorange="reversed", type="category")
    return _layout(fig, title, height=140 + 40 * k)


def rankset_intervals_figure(table: pd.DataFrame, title: str = "Rank-sets") -> go.Figure:
    """Horizontal intervals [lower, upper] per model (columns model, lower, upper[, method][, theta]).
    With a method column, the methods' sets of a model sit side by side (offset rows), with a legend."""
    fig, groups = go.Figure(), table["method"].unique().tolist() if "method" in table else [""]
    models, G = list(dict.fromkeys(table["model"])), len(groups)
    pos = {m: i for i, m in enumerate(models)}
    for gi, g in enumerate(groups):
        part = table[table["method"] == g] if "method" in table else table
        color = PALETTE[gi % len(PALETTE)]
        off = (gi - (G - 1) / 2) * (0.6 / max(G, 1)) if G > 1 else 0.0
        for ri, rec in enumerate(part.to_dict("records")):
            theta = f", theta = {rec['theta']:.3f}" if "theta" in rec and rec["theta"] == rec["theta"] else ""
            y = pos[rec["model"]] + off
            fig.add_trace(go.Scatter(x=[rec["lower"], rec["upper"]], y=[y, y], mode="lines+markers",
                                     line=dict(color=color, width=6), marker=dict(size=10), name=g or "rank-set",
                                     legendgroup=g, showlegend=bool(g) and ri == 0,
                                     hovertext=f"{g + ': ' if g else ''}{rec['model']}: ranks "
                                               f"{rec['lower']}-{rec['upper']}{theta}", hoverinfo="text"))
    k = len(models)
    fig.update_xaxes(title="rank (1 = best)", dtick=1, range=[0.5, k + 0.5])
    fig.update_yaxes(tickvals=list(range(k)), ticktext=models, range=[k - 0.5, -0.5])  # best on top
    return _layout(fig, title, height=140 + (35 + 15 * (G - 1)) * k, legend=dict(orientation="h", y=-0.15))


def accuracy_ranks_figure(table: pd.DataFrame, level: float = 0.95, title: str = "Accuracy and rank-sets") -> go.Figure:
    """Per model, best on top: accuracy and interval (left), rank-set beside it (right, :func:`rankset_intervals_figure`)."""
    fig, k = rankset_intervals_figure(table, title), len(table)
    acc, lo, hi = (table[c].astype(float).tolist() for c in ("accuracy", "ci_low", "ci_high"))
    fig.add_trace(go.Scatter(x=acc, y=list(range(k)), xaxis="x2", mode="markers", showlegend=False, hoverinfo="text",
                             hovertext=[f"{m}: {a:.3f} [{c:.3f}, {d:.3f}]" for m, a, c, d in zip(table.model, acc, lo, hi)],
                             marker=dict(size=10, color=PALETTE[1]), error_x=dict(type="data", symmetric=False, array=[
                                 h - a for a, h in zip(acc, hi)], arrayminus=[a - low for a, low in zip(acc, lo)])))
    fig.update_layout(xaxis=dict(domain=[0.55, 1], title=f"rank-set ({level:.0%}; 1 = best)"), yaxis_anchor="x2",
                      xaxis2=dict(domain=[0, 0.47], anchor="y", range=[-0.02, 1.02], title=f"accuracy ({level:.0%} CI)"),
                      height=160 + 35 * k)
    return fig


def tradeoff_figure(df: pd.DataFrame, x: str = "size", y: str = "intersection", group: str = "method",
                    title: str = "Rank-set size vs baseline intersection") -> go.Figure:
    """Curves of y vs x per group (e.g. one point per alpha, one curve per method)."""
    fig = go.Figure()
    for i, (g, part) in enumerate(df.groupby(group, sort=False)):
        part = part.sort_values(x)
        fig.add_trace(go.Scatter(x=part[x], y=part[y], mode="lines+markers", name=str(g),
                                 line=dict(color=PALETTE[i % len(PALETTE)]),
                                 hovertext=[f"alpha={a}" for a in part.get("alpha", [None] * len(part))]))
    fig.update_xaxes(title="average rank-set size")
    fig.update_yaxes(title="baseline intersection probability", range=[0, 1.02])
    return _layout(fig, title, height=380)


# --------------------------------------------------------------------------- data map

def datamap_figure(prompts: pd.DataFrame, p_max: float, s_min: float, title: str = "Data map") -> go.Figure:
    """P(correct) (x) vs semantic consistency (y) per prompt, flagged region shaded."""
    if prompts.empty:
        return empty_figure("no prompts")
    fig = go.Figure()
    s_low = float(min(prompts["consistency"].min(), s_min)) - 0.1
    fig.add_shape(type="rect", x0=-0.02, x1=p_max, y0=s_min, y1=0.05, fillcolor="#ffe3e3", opacity=0.6,
                  line=dict(color="#c92a2a", dash="dash"), layer="below")
    # P(correct) takes the values j/k and S few values too: prompts pile up on the same point, so
    # draw one marker per distinct point, its area growing with the number of prompts there.
    pts = (prompts.assign(px=prompts["p_correct"].round(9), sy=prompts["consistency"].round(9))
           .groupby(["flagged", "px", "sy"], sort=False)["prompt_id"].agg(list).reset_index())
    for flagged, part in pts.groupby("flagged"):
        counts = part["prompt_id"].map(len)
        fig.add_trace(go.Scatter(
            x=part["px"], y=part["sy"], mode="markers",
            name="flagged" if flagged else "prompts",
            marker=dict(size=(7 + 4 * np.sqrt(counts - 1)).tolist(), color="#c92a2a" if flagged else "#3b5bdb",
                        opacity=0.7, line=dict(color="white", width=1)),
            hovertext=[f"{len(ids)} prompt(s): {html.escape(', '.join(map(str, ids[:12])))}{' …' if len(ids) > 12 else ''}"
                       f"<br>P(correct)={p:.2f}<br>S={s:.3f}" for ids, p, s in zip(part["prompt_id"], part["px"], part["sy"])],
            hoverinfo="text"))
    fig.update_xaxes(title="P(correct)", range=[-0.03, 1.03])
    fig.update_yaxes(title="semantic consistency S = Σ Prop log Prop", range=[s_low, 0.08])
    return _layout(fig, title, height=420)


def histogram_figure(values: Sequence[float], counts: Sequence[int], title: str = "", xaxis: str = "") -> go.Figure:
    """A histogram from precomputed (value, count) pairs."""
    fig = go.Figure(go.Bar(x=list(values), y=list(counts), marker_color="#3b5bdb"))
    fig.update_xaxes(title=xaxis)
    fig.update_yaxes(title="prompts")
    return _layout(fig, title, height=320)


def variance_figure(components: Mapping[str, float], title: str = "Variance of the benchmark score",
                    total: float | None = None) -> go.Figure:
    """Stacked bar of the within- and between-prompt variance components; ``total`` (the variance
    the CI uses, σ̂²/n) as a dashed line: the parts add up to it unless the between part is clipped at 0."""
    fig = go.Figure()
    for i, (k, v) in enumerate(components.items()):
        fig.add_trace(go.Bar(x=["Var(μ̂)"], y=[v], name=k, marker_color=PALETTE[i % len(PALETTE)]))
    if total is not None:  # a wide horizontal tick across the bar, named in the legend (no label over the bar)
        fig.add_trace(go.Scatter(x=["Var(μ̂)"], y=[total], mode="markers", name=f"Var̂(μ̂) = σ̂²/n = {total:.3g}",
                                 marker=dict(symbol="line-ew", size=120, line=dict(color="#212529", width=3))))
    fig.update_yaxes(title="variance", exponentformat="e")
    return _layout(fig, title, height=320, barmode="stack")


def divergence_figure(df: pd.DataFrame, title: str = "First divergence step of the coupled generations") -> go.Figure:
    """Histogram of the first step where the models' tokens differ, over a run's units; units that
    never diverge are counted in the title (rows of ``engine.analysis.traces.divergence_summary``)."""
    if df.empty:
        return empty_figure("no coupled traces for these models")
    div = df["first_divergence"].dropna().astype(int)
    never = int(df["first_divergence"].isna().sum())
    fig = go.Figure(go.Histogram(x=div, xbins=dict(start=-0.5, size=1), marker_color="#3b5bdb",
                                 hovertemplate="step %{x}: %{y} units<extra></extra>"))
    fig.update_xaxes(title="first step where the tokens differ")
    fig.update_yaxes(title="units (prompt, repeat)")
    return _layout(fig, f"{title} · {never} of {len(df)} units never diverge", height=320)


# --------------------------------------------------------------------------- the CLI's Fig. 2 panels

def write_benchmark_figures(res: Any, folder: str) -> list[str]:
    """The paper's Fig. 2 panels for one benchmark-compare result (an
    ``engine.analysis.benchmark_result.BenchmarkComparison``, read by attribute), as PNG files in ``folder``.

    (a) KDE of the per-question covariance (coupled; dashed line at the mean), (b) KDEs of the
    per-question variance of the difference (coupled vs independent; dashed lines at the medians),
    (c) mean estimation error vs number of samples with the 2.5/97.5 percentile band.
    """
    import os
    from pathlib import Path

    os.environ.setdefault("BROWSER_PATH", "/usr/bin/chromium")
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    a, b = res.models
    tag = "_".join(x for x in (res.subject or "all", a, "vs", b) if x).replace("/", "-")
    title = f"{a} vs {b} ({res.subject or 'all subjects'})"
    colors = {"coupled": "#1f77b4", "independent": "#ff7f0e"}
    paths = []

    k = res.kde.covariance_coupled
    fig = go.Figure(go.Scatter(x=k.x, y=k.density, mode="lines", name="coupled",
                               line=dict(color=colors["coupled"])))
    fig.add_vline(x=res.mean_covariance_coupled, line_dash="dash",
                  annotation_text=f"mean {res.mean_covariance_coupled:.3f}")
    fig.update_layout(title=f"(a) Score covariance per question<br><sub>{title}</sub>",
                      xaxis_title="covariance", yaxis_title="density")
    paths.append(d / f"{tag}_covariance.png")
    fig.write_image(paths[-1], width=700, height=450)

    fig = go.Figure()
    for mode in ("coupled", "independent"):
        k = getattr(res.kde, f"var_diff_{mode}")
        med = getattr(res, f"median_var_diff_{mode}")
        if k is None or med is None:
            continue
        fig.add_trace(go.Scatter(x=k.x, y=k.density, mode="lines", name=mode, line=dict(color=colors[mode])))
        fig.add_vline(x=med, line_dash="dash", line_color=colors[mode], annotation_text=f"median {med:.3f}",
                      annotation_position="top left" if mode == "coupled" else "top right")
    fig.update_layout(title=f"(b) Variance of the score difference per question<br><sub>{title}</sub>",
                      xaxis_title="variance of the difference", yaxis_title="density")
    paths.append(d / f"{tag}_var_diff.png")
    fig.write_image(paths[-1], width=700, height=450)

    fig = go.Figure()
    n = [r["n"] for r in res.error_curve]
    for mode in ("coupled", "independent"):
        if res.error_curve[0].get(mode) is None:
            continue
        fig.add_trace(go.Scatter(x=n + n[::-1], y=[r[f"{mode}_high"] for r in res.error_curve]
                                 + [r[f"{mode}_low"] for r in res.error_curve][::-1],
                                 fill="toself", opacity=0.2, line=dict(width=0), showlegend=False,
                                 fillcolor=colors[mode], hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=n, y=[r[mode] for r in res.error_curve], mode="lines", name=mode,
                                 line=dict(color=colors[mode])))
    sd = res.saving_detail
    if sd.saving is not None:
        fig.add_hline(y=sd.error, line_dash="dot",
                      annotation_text=f"error {sd.error:.3f}: {100 * sd.saving:.0f}% fewer samples")
    fig.update_layout(title=f"(c) Estimation error vs number of samples (band: 2.5-97.5%)<br><sub>{title}</sub>",
                      xaxis_title="number of samples", yaxis_title="absolute error")
    paths.append(d / f"{tag}_error_curve.png")
    fig.write_image(paths[-1], width=700, height=450)
    return [str(p) for p in paths]
