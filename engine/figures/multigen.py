"""Figures layer of multiple generations: a result -> Plotly figures.

Multiple-generation figures (Zhang et al.): the data map of P(correct) against semantic
consistency, histograms and the variance decomposition."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from engine.figures.common import PALETTE, empty_figure, layout


def datamap_figure(
    prompts: pd.DataFrame, p_max: float, s_min: float, title: str = "Data map"
) -> go.Figure:
    """P(correct) (x) vs semantic consistency (y) per prompt, flagged region shaded."""
    if prompts.empty:
        return empty_figure("no prompts")
    fig = go.Figure()
    s_low = float(min(prompts["consistency"].min(), s_min)) - 0.1
    fig.add_shape(
        type="rect",
        x0=-0.02,
        x1=p_max,
        y0=s_min,
        y1=0.05,
        fillcolor="#ffe3e3",
        opacity=0.6,
        line=dict(color="#c92a2a", dash="dash"),
        layer="below",
    )
    # P(correct) takes the values j/k and S few values too: prompts pile up on the same point, so
    # draw one marker per distinct point, its area growing with the number of prompts there.
    pts = (
        prompts.assign(px=prompts["p_correct"].round(9), sy=prompts["consistency"].round(9))
        .groupby(["flagged", "px", "sy"], sort=False)["prompt_id"]
        .agg(list)
        .reset_index()
    )
    for flagged, part in pts.groupby("flagged"):
        counts = part["prompt_id"].map(len)
        fig.add_trace(
            go.Scatter(
                x=part["px"],
                y=part["sy"],
                mode="markers",
                name="flagged" if flagged else "prompts",
                marker=dict(
                    size=(7 + 4 * np.sqrt(counts - 1)).tolist(),
                    color="#c92a2a" if flagged else "#3b5bdb",
                    opacity=0.7,
                    line=dict(color="white", width=1),
                ),
                hovertext=[
                    f"{len(ids)} prompt(s): "
                    f"{html.escape(', '.join(map(str, ids[:12])))}{' …' if len(ids) > 12 else ''}"
                    f"<br>P(correct)={p:.2f}<br>S={s:.3f}"
                    for ids, p, s in zip(part["prompt_id"], part["px"], part["sy"])
                ],
                hoverinfo="text",
            )
        )
    fig.update_xaxes(title="P(correct)", range=[-0.03, 1.03])
    fig.update_yaxes(title="semantic consistency S = Σ Prop log Prop", range=[s_low, 0.08])
    return layout(fig, title, height=420)


def histogram_figure(
    values: Sequence[float], counts: Sequence[int], title: str = "", xaxis: str = ""
) -> go.Figure:
    """A histogram from precomputed (value, count) pairs."""
    fig = go.Figure(go.Bar(x=list(values), y=list(counts), marker_color="#3b5bdb"))
    fig.update_xaxes(title=xaxis)
    fig.update_yaxes(title="prompts")
    return layout(fig, title, height=320)


def variance_figure(
    components: Mapping[str, float],
    title: str = "Variance of the benchmark score",
    total: float | None = None,
) -> go.Figure:
    """Stacked bar of the within- and between-prompt variance components; ``total`` (the variance the CI
    uses, σ̂²/n) as a dashed line: the parts add up to it unless the between part is clipped at 0."""
    fig = go.Figure()
    for i, (k, v) in enumerate(components.items()):
        fig.add_trace(go.Bar(x=["Var(μ̂)"], y=[v], name=k, marker_color=PALETTE[i % len(PALETTE)]))
    if (
        total is not None
    ):  # a wide horizontal tick across the bar, named in the legend (no label over the bar)
        fig.add_trace(
            go.Scatter(
                x=["Var(μ̂)"],
                y=[total],
                mode="markers",
                name=f"Var̂(μ̂) = σ̂²/n = {total:.3g}",
                marker=dict(symbol="line-ew", size=120, line=dict(color="#212529", width=3)),
            )
        )
    fig.update_yaxes(title="variance", exponentformat="e")
    return layout(fig, title, height=320, barmode="stack")
