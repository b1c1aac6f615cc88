"""Figures layer of the sequential evaluation: a result -> Plotly figures.

Sequential (anytime-valid) evaluation figures: a pair's confidence sequence against questions seen,
both modes on one chart (docs/SEQUENTIAL.md), and the stopping times over orders."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from engine.figures.common import COLORS, PALETTE, layout


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)}, {int(h[2:4], 16)}, {int(h[4:6], 16)}, {alpha})"


def log_ticks(N: int) -> list[int]:
    """Tick values of a log axis over 1..N: 1, 2, 5, 10, 20, 50, ... below N, and N itself (a value
    closer than a factor 1.5 below N dropped so that labels do not collide)."""
    ticks, base = [], 1
    while base <= N:
        ticks += [v for v in (base, 2 * base, 5 * base) if v * 1.5 <= N]
        base *= 10
    return sorted(set(ticks)) + [int(N)]


def sequential_cs_figure(paths: Sequence[Any], title: str = "Confidence sequence of A − B") -> go.Figure:
    """Each path (engine.analysis.sequential.SequentialPath or anything with mode, t, lower, upper,
    n_stop, full, N): a band of the CS against questions seen (log axis), the zero line, the
    full-run value and a marker at the stop."""
    fig = go.Figure()
    for i, p in enumerate(paths):
        color = COLORS.get(p.mode, PALETTE[i % len(PALETTE)])
        t = list(p.t)
        fig.add_trace(
            go.Scatter(
                x=t + t[::-1],
                y=list(p.upper) + list(p.lower)[::-1],
                fill="toself",
                fillcolor=_rgba(color, 0.18),
                line=dict(width=0),
                hoverinfo="skip",
                name=f"{p.mode} CS",
                legendgroup=p.mode,
            )
        )
        for side, ys in (("upper", p.upper), ("lower", p.lower)):
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=list(ys),
                    mode="lines",
                    line=dict(color=color, width=1.5),
                    name=f"{p.mode} {side}",
                    legendgroup=p.mode,
                    showlegend=False,
                    hovertemplate="question %{x}: %{y:+.4f}<extra>" + f"{p.mode} {side}</extra>",
                )
            )
        if p.n_stop:
            k = t.index(p.n_stop)
            fig.add_trace(
                go.Scatter(
                    x=[p.n_stop, p.n_stop],
                    y=[p.lower[k], p.upper[k]],
                    mode="lines+markers",
                    line=dict(color=color, width=3),
                    marker=dict(symbol="line-ew-open", size=12),
                    name=f"{p.mode} stop (question {p.n_stop:,})",
                    legendgroup=p.mode,
                    hovertemplate=f"stop at question {p.n_stop:,}<extra>{p.mode}</extra>",
                )
            )
        if p.full == p.full:  # NaN for a live run
            fig.add_hline(
                y=p.full,
                line=dict(color=color, dash="dot", width=1),
                annotation_text=f"full run ({p.mode}) {p.full:+.3f}",
                annotation_position="top left" if i % 2 == 0 else "bottom left",
            )
    fig.add_hline(y=0.0, line=dict(color="#212529", width=1.5))
    N = max(int(p.N) for p in paths) if paths else 1
    ticks = log_ticks(N)
    fig.update_xaxes(  # whole numbers 1, 2, 5, 10, ..., N (plotly's own log ticks read "10, 2, 3, 4, 5")
        type="log",
        title=f"questions seen (random order), of N = {N:,}",
        range=[0.0, math.log10(N) + 0.02],  # ends at N (a small pad keeps a stop marker at N visible)
        tickmode="array",
        tickvals=ticks,
        ticktext=[f"{v:,}" for v in ticks],
    )
    fig.update_yaxes(title="A − B (difference of accuracy)")
    return layout(fig, title, height=420, legend=dict(orientation="h", y=-0.25))


def stopping_times_figure(
    modes: Sequence[Any], title: str = "Stopping question over random orders"
) -> go.Figure:
    """One box (with every order as a point) per mode; ``modes``: ModeReplay-like (mode,
    n_questions, stop_counts())."""
    fig = go.Figure()
    for i, m in enumerate(modes):
        color = COLORS.get(m.mode, PALETTE[i % len(PALETTE)])
        fig.add_trace(
            go.Box(
                y=m.stop_counts(),
                name=m.mode,
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker_color=color,
                hovertemplate="stop at question %{y}<extra>" + m.mode + "</extra>",
            )
        )
    fig.update_yaxes(title="questions used until the rule held", rangemode="tozero")
    return layout(fig, title, height=380, showlegend=False)
