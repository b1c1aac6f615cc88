"""Colours, layout and the charts every family uses: an empty figure with a message, and estimates
with their intervals (accuracy, win-rates, the judge audit, rank-set inputs)."""

from __future__ import annotations

import html
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

COLORS = {"coupled": "#3b5bdb", "independent": "#e8590c"}


PALETTE = [
    "#3b5bdb",
    "#e8590c",
    "#2b8a3e",
    "#ae3ec9",
    "#c92a2a",
    "#1098ad",
    "#f08c00",
    "#5c940d",
    "#495057",
    "#d6336c",
    "#364fc7",
    "#087f5b",
]


AGREE, DISAGREE, MISSING = "#b2f2bb", "#ffc9c9", "#e9ecef"


TEMPLATE = "plotly_white"
LAYOUT = dict(margin=dict(l=60, r=20, t=50, b=50), font=dict(size=13))


def layout(fig: go.Figure, title: str, **kw) -> go.Figure:
    """Our title, margins and font, and the ``plotly_white`` template."""
    fig.update_layout(title=dict(text=title, x=0.0, xanchor="left"), **LAYOUT, **kw)
    _set_template(fig, TEMPLATE)
    return fig


def _set_template(fig: go.Figure, name: str) -> None:
    """Store a copy of plotly's registered template ``name`` in the figure without validating it
    again. Validation rebuilds the template's definition of every trace type: 12 of the 15 ms a small
    figure took to build and serialise (1.8 ms without it; docs/BENCHMARKS.md, "Dashboard"), paid by
    every chart of every page run. The registered template was validated when plotly built it, and
    plotly assigns its own default template this way (``BaseFigure._initialize_layout_template``);
    the figure is the same either way (tests/test_figures_template.py)."""
    import plotly.io as pio

    lay = fig.layout
    validate = lay._validate
    lay._validate = False  # the template's JSON (a deep copy) goes into the layout as it is
    try:
        lay.template = pio.templates[name]
    finally:
        lay._validate = validate


def empty_figure(message: str) -> go.Figure:
    """A blank figure carrying a message (used when there is nothing to draw)."""
    fig = go.Figure()
    fig.add_annotation(
        text=html.escape(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
    )
    fig.update_layout(xaxis_visible=False, yaxis_visible=False)
    return layout(fig, "", height=200)


def interval_figure(
    labels: Sequence[str],
    values: Sequence[float],
    lows: Sequence[float],
    highs: Sequence[float],
    groups: Sequence[str] | None = None,
    title: str = "",
    yaxis: str = "",
    horizontal_line: float | None = None,
) -> go.Figure:
    """Points (or bars) with confidence intervals, optionally grouped (e.g. by mode)."""
    df = pd.DataFrame(
        {
            "label": list(labels),
            "v": list(values),
            "lo": list(lows),
            "hi": list(highs),
            "g": list(groups) if groups is not None else [""] * len(labels),
        }
    )
    fig = go.Figure()
    for i, (g, part) in enumerate(df.groupby("g", sort=False)):
        color = COLORS.get(g, PALETTE[i % len(PALETTE)])
        fig.add_trace(
            go.Bar(
                x=part["label"],
                y=part["v"],
                name=g or yaxis,
                marker_color=color,
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=part["hi"] - part["v"],
                    arrayminus=part["v"] - part["lo"],
                ),
                hovertemplate="%{x}: %{y:.4f}<extra>" + (g or "") + "</extra>",
            )
        )
    if horizontal_line is not None:
        fig.add_hline(y=horizontal_line, line=dict(color="#495057", dash="dot"))
    fig.update_yaxes(title=yaxis)
    return layout(
        fig,
        title,
        height=360,
        barmode="group",
        showlegend=groups is not None,
        legend=dict(orientation="h", y=-0.2),
    )
