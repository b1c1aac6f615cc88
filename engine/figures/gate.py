"""Figures layer of the release gate: a decision -> a Plotly figure.

The gate's interval for B − A against the margin (presentation, no Streamlit): the estimate with its
interval, a dashed line at −M, the region of non-inferiority (Δ > −M) shaded, and 0 dotted. The interval
is green when it lies wholly above −M (PASS), red wholly below (FAIL), grey when it contains −M."""

from __future__ import annotations

import plotly.graph_objects as go

from engine.figures.common import layout

COLOURS = {"non-inferior": "#2b8a3e", "worse": "#c92a2a", "undecided": "#868e96"}


def gate_figure(decision) -> go.Figure:
    """The interval of :class:`engine.analysis.gate.GateDecision` (``difference``, ``lower``, ``upper``)
    against ``-margin``; the title says the decision and the interval's method and level."""
    d = decision
    m = d.margin
    colour = COLOURS.get(d.decision, COLOURS["undecided"])
    lo = min(d.lower, -m, 0.0)
    hi = max(d.upper, 0.0)
    pad = max(0.25 * (hi - lo), 0.005)
    fig = go.Figure(
        go.Scatter(
            x=[d.difference],
            y=[d.label],
            mode="markers",
            marker=dict(color=colour, size=12),
            error_x=dict(
                type="data",
                symmetric=False,
                array=[d.upper - d.difference],
                arrayminus=[d.difference - d.lower],
                thickness=3,
                width=10,
                color=colour,
            ),
            hovertemplate=f"{d.label}: %{{x:.4f}} [{d.lower:.4f}, {d.upper:.4f}]<extra></extra>",
            name=d.label,
        )
    )
    fig.add_vrect(x0=-m, x1=hi + pad, fillcolor="#2b8a3e", opacity=0.07, line_width=0, layer="below")
    fig.add_vline(x=-m, line=dict(color="#c92a2a", dash="dash"), annotation_text=f"−M = {-m:g}")
    fig.add_vline(x=0, line=dict(color="#495057", dash="dot"))
    fig.update_xaxes(title=f"{d.label} (accuracy difference)", range=[lo - pad, hi + pad])
    fig.update_yaxes(type="category", showticklabels=False)
    level = f"{1 - d.alpha:.0%}"
    kind = "confidence sequence" if "anytime" in d.method else "interval"
    verdict = {"non-inferior": "PASS", "worse": "FAIL"}.get(d.decision, "UNDECIDED")
    return layout(
        fig,
        f"Release gate: {verdict} ({d.decision}); {level} {kind}, {d.n_questions:,} questions",
        height=240,
        showlegend=False,
    )
