"""Figures layer of per-slice results: a result -> Plotly figures.

The forest plot of per-slice differences (presentation, no Streamlit): one row per subject, task or
category, its difference (A − B accuracy, or W_AB − W_BA win-rates) with the simultaneous interval, a
line at 0 and the whole run's (set's) difference."""

from __future__ import annotations

import plotly.graph_objects as go

from engine.figures.common import PALETTE, empty_figure, layout


def forest_figure(
    frame,
    overall: float | None = None,
    label: str = "A − B",
    by: str = "subject",
    conf: float = 0.95,
    what: str = "accuracy difference",
    overall_name: str = "whole run",
) -> go.Figure:
    """Points with horizontal error bars from ``SliceComparison.frame()`` or ``WinRateSlices.frame()``
    (slice, n, difference, lower, upper, ...); a slice whose interval excludes 0 is drawn in the second
    colour.

    Args:
        frame: one row per slice; overall: the whole run's (set's) difference (a dashed line), or None;
        label: what the difference is ("x − y"); by: "subject", "task" or "category"; conf: the
        simultaneous level; what: the difference's kind (the x axis); overall_name: the dashed line's name.
    """
    if frame is None or len(frame) == 0:
        return empty_figure(f"no {by} to show")
    f = frame.iloc[::-1]  # first slice at the top
    sig = (f["lower"] > 0) | (f["upper"] < 0)
    fig = go.Figure(
        go.Scatter(
            x=f["difference"],
            y=f["slice"],
            mode="markers",
            marker=dict(color=[PALETTE[1] if s else PALETTE[0] for s in sig], size=8),
            error_x=dict(
                type="data",
                symmetric=False,
                array=f["upper"] - f["difference"],
                arrayminus=f["difference"] - f["lower"],
                thickness=1.5,
            ),
            customdata=f[["n", "lower", "upper"]].to_numpy(),
            hovertemplate="%{y}: %{x:.3f} [%{customdata[1]:.3f}, %{customdata[2]:.3f}], "
            "n = %{customdata[0]}<extra></extra>",
            name=label,
        )
    )
    fig.add_vline(x=0, line=dict(color="#495057", dash="dot"))
    if overall is not None:
        fig.add_vline(x=overall, line=dict(color=PALETTE[2], dash="dash"), annotation_text=overall_name)
    fig.update_xaxes(title=f"{label} ({what})")
    fig.update_yaxes(type="category")
    return layout(
        fig,
        f"{label} per {by}, {conf:.0%} intervals that hold for all {len(f)} at once",
        height=max(320, 22 * len(f) + 120),
        showlegend=False,
    )
