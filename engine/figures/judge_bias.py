"""Figures layer of the judge biases: a result -> Plotly figures.

The judge audit's bias figures (presentation, no Streamlit): the share of verdicts that pick the
longer response by length gap, judge and people side by side."""

from __future__ import annotations

import plotly.graph_objects as go

from engine.figures.common import empty_figure, interval_figure


def length_bias_figure(table, conf: float = 0.95) -> go.Figure:
    """Bars with intervals from ``JudgeBiases.length_table()`` (length gap, rater, share picking the
    longer, lower, upper, n); a dotted line at 1/2 (length does not matter)."""
    t = table[table["n"] > 0]
    if t.empty:
        return empty_figure("no units whose two responses differ in length")
    nan = float("nan")
    return interval_figure(
        t["length gap"].tolist(),
        [nan if v is None else v for v in t["share picking the longer"]],
        [nan if v is None else v for v in t["lower"]],
        [nan if v is None else v for v in t["upper"]],
        groups=t["rater"].tolist(),
        title=f"Who picks the longer response, by length gap ({conf:.0%} CI)",
        yaxis="share picking the longer",
        horizontal_line=0.5,
    )
