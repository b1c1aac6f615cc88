"""Rank-set figures: each model's rank-set (PPR, max-t, accuracy) and the rank-set draws' dot chart
and size trade-off."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from engine.figures.common import PALETTE, layout


def rankset_dots_figure(
    prob, models: Sequence[str], title: str = "P(rank position in rank-set)"
) -> go.Figure:
    """Dot plot: for each model (y) and rank position (x), dot size = probability (PPR paper, Fig. 3)."""
    P = np.asarray(prob, dtype=float)  # (k, k)
    k = P.shape[0]
    rows, ranks = (
        a.tolist() for a in np.nonzero(P > 0)
    )  # row-major: each model's positions in rank order
    ss = P[rows, ranks].tolist()
    hv = [f"{models[i]}, rank {r + 1}: {p:.3f}" for i, r, p in zip(rows, ranks, ss)]
    fig = go.Figure(
        go.Scatter(
            x=[r + 1 for r in ranks],
            y=[models[i] for i in rows],
            mode="markers",
            hovertext=hv,
            hoverinfo="text",
            marker=dict(
                size=[4 + 26 * s for s in ss],
                color=ss,
                colorscale="Blues",
                cmin=0,
                cmax=1,
                line=dict(color="#364fc7", width=1),
                colorbar=dict(title="P"),
            ),
        )
    )
    fig.update_xaxes(title="rank position (1 = best)", dtick=1, range=[0.5, k + 0.5])
    fig.update_yaxes(autorange="reversed", type="category")
    return layout(fig, title, height=140 + 40 * k)


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
            theta = (
                f", theta = {rec['theta']:.3f}"
                if "theta" in rec and rec["theta"] == rec["theta"]
                else ""
            )
            y = pos[rec["model"]] + off
            fig.add_trace(
                go.Scatter(
                    x=[rec["lower"], rec["upper"]],
                    y=[y, y],
                    mode="lines+markers",
                    line=dict(color=color, width=6),
                    marker=dict(size=10),
                    name=g or "rank-set",
                    legendgroup=g,
                    showlegend=bool(g) and ri == 0,
                    hovertext=f"{g + ': ' if g else ''}{rec['model']}: ranks "
                    f"{rec['lower']}-{rec['upper']}{theta}",
                    hoverinfo="text",
                )
            )
    k = len(models)
    fig.update_xaxes(title="rank (1 = best)", dtick=1, range=[0.5, k + 0.5])
    fig.update_yaxes(tickvals=list(range(k)), ticktext=models, range=[k - 0.5, -0.5])  # best on top
    if not any(groups):
        return layout(fig, title, height=140 + 35 * k)
    # the legend in its own band at the figure's bottom edge (container coordinates), below the axis
    # title: placed in plot coordinates (y = -0.15) it sat on the title whatever the figure's height
    layout(
        fig,
        title,
        height=180 + (35 + 15 * (G - 1)) * k,
        legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom", x=0.0, xanchor="left"),
    )
    return fig.update_layout(margin_b=95)  # the axis title, then the legend's band


def accuracy_ranks_figure(
    table: pd.DataFrame, level: float = 0.95, title: str = "Accuracy and rank-sets"
) -> go.Figure:
    """Per model, best on top: accuracy and interval (left), rank-set beside it (right,
    :func:`rankset_intervals_figure`)."""
    fig, k = rankset_intervals_figure(table, title), len(table)
    acc, lo, hi = (table[c].astype(float).tolist() for c in ("accuracy", "ci_low", "ci_high"))
    fig.add_trace(
        go.Scatter(
            x=acc,
            y=list(range(k)),
            xaxis="x2",
            mode="markers",
            showlegend=False,
            hoverinfo="text",
            hovertext=[
                f"{m}: {a:.3f} [{c:.3f}, {d:.3f}]" for m, a, c, d in zip(table.model, acc, lo, hi)
            ],
            marker=dict(size=10, color=PALETTE[1]),
            error_x=dict(
                type="data",
                symmetric=False,
                array=[h - a for a, h in zip(acc, hi)],
                arrayminus=[a - low for a, low in zip(acc, lo)],
            ),
        )
    )
    fig.update_layout(
        xaxis=dict(domain=[0.55, 1], title=f"rank-set ({level:.0%}; 1 = best)"),
        yaxis_anchor="x2",
        xaxis2=dict(
            domain=[0, 0.47], anchor="y", range=[-0.02, 1.02], title=f"accuracy ({level:.0%} CI)"
        ),
        height=160 + 35 * k,
    )
    return fig


def tradeoff_figure(
    df: pd.DataFrame,
    x: str = "size",
    y: str = "intersection",
    group: str = "method",
    title: str = "Rank-set size vs baseline intersection",
) -> go.Figure:
    """Curves of y vs x per group (e.g. one point per alpha, one curve per method)."""
    fig = go.Figure()
    for i, (g, part) in enumerate(df.groupby(group, sort=False)):
        part = part.sort_values(x)
        fig.add_trace(
            go.Scatter(
                x=part[x],
                y=part[y],
                mode="lines+markers",
                name=str(g),
                line=dict(color=PALETTE[i % len(PALETTE)]),
                hovertext=[f"alpha={a}" for a in part.get("alpha", [None] * len(part))],
            )
        )
    fig.update_xaxes(title="average rank-set size")
    fig.update_yaxes(title="baseline intersection probability", range=[0, 1.02])
    return layout(fig, title, height=380)
