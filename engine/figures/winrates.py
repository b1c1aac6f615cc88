"""Figures layer of win-rates: a result -> Plotly figures.

Win-rate figures: the pairwise win-rate heat map and per-pair bars, coupled vs independent."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from engine.figures.common import COLORS, PALETTE, layout


def heatmap_figure(
    matrix,
    models: Sequence[str],
    title: str = "Win-rate of row over column",
    counts=None,
    zmin: float = 0.0,
    zmax: float = 1.0,
    colorscale: str = "RdBu",
) -> go.Figure:
    """A (k, k) matrix as a heatmap with values written in the cells (NaN cells left blank)."""
    M = np.asarray(matrix, dtype=float)
    text = [["" if np.isnan(v) else f"{v:.2f}" for v in row] for row in M]
    hover = [
        [
            f"{models[i]} vs {models[j]}: "
            + ("n/a" if np.isnan(M[i, j]) else f"{M[i, j]:.3f}")
            + (f" (n={int(counts[i][j])})" if counts is not None else "")
            for j in range(len(models))
        ]
        for i in range(len(models))
    ]
    fig = go.Figure(
        go.Heatmap(
            z=M,
            x=list(models),
            y=list(models),
            zmin=zmin,
            zmax=zmax,
            colorscale=colorscale,
            text=text,
            texttemplate="%{text}",
            hovertext=hover,
            hoverinfo="text",
        )
    )
    fig.update_yaxes(autorange="reversed")
    return layout(fig, title, height=160 + 45 * len(models))


def pair_bars_figure(
    pairs: pd.DataFrame, groups: Sequence[str] | None = None, title: str = "Per-pair win-rate (95% CI)"
) -> go.Figure:
    """Bars per ordered pair, one per group, with the CIs as error bars (columns pair, <g>, <g>_low,
    <g>_high per group; optional stars: drawn above the pair when two groups were compared)."""
    groups = (
        list(groups) if groups is not None else [g for g in ("coupled", "independent") if g in pairs]
    )
    fig = go.Figure()
    for i, g in enumerate(groups):
        err = None
        if f"{g}_low" in pairs and f"{g}_high" in pairs:
            v = pairs[g].astype(float)
            err = dict(
                type="data",
                symmetric=False,
                array=(pairs[f"{g}_high"].astype(float) - v).clip(lower=0),
                arrayminus=(v - pairs[f"{g}_low"].astype(float)).clip(lower=0),
            )
        fig.add_trace(
            go.Bar(
                x=pairs["pair"],
                y=pairs[g],
                name=g,
                error_y=err,
                marker_color=COLORS.get(g, PALETTE[i % len(PALETTE)]),
            )
        )
    if "stars" in pairs and len(groups) > 1:
        top = pd.concat(
            [pairs[f"{g}_high"] if f"{g}_high" in pairs else pairs[g] for g in groups], axis=1
        ).max(axis=1)
        for x, y, s in zip(pairs["pair"], top, pairs["stars"]):
            if s:
                fig.add_annotation(x=x, y=y, text=s, showarrow=False, yshift=12)
    fig.update_yaxes(title="win-rate", range=[0, 1.1])
    return layout(
        fig,
        title,
        height=400,
        barmode="group",
        showlegend=len(groups) > 1,
        legend=dict(orientation="h", y=-0.3),
    )
