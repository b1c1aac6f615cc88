"""Figures layer of racing many models: a result -> Plotly figures.

Racing figures (docs/METHODS.md 8.4): each model's confidence sequence against the current leader,
the models that left greyed out; and a replay's generations, race vs 8.3's joint stop vs fixed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from engine.figures.common import COLORS, PALETTE, empty_figure, layout

GREY = "#b0b0b0"


def race_intervals_figure(state: Any, title: str | None = None) -> go.Figure:
    """One mode of a race (engine.analysis.race.RaceModeState, or anything with leader, models (each
    with model, status, answered, lower, upper, missed), t, generations, saved): per model, the CS of
    leader − model (Δ scale, at α/P) as a horizontal bar with the zero line: a bar wholly right of
    0 means the leader is shown better. Models that left are grey, with why and when."""
    rows = [m for m in state.models if m.model != state.leader]
    if not rows:
        return empty_figure("one model only")
    fig = go.Figure()
    y = [f"{m.model} ({m.status}, {m.answered:,} q)" for m in rows]
    for m, label in zip(rows, y):
        active = m.status == "active"
        color = COLORS.get(state.mode, PALETTE[0]) if active else GREY
        lo, up = m.lower, m.upper
        if math.isnan(lo) or math.isnan(up):
            continue
        fig.add_trace(
            go.Scatter(
                x=[lo, up],
                y=[label, label],
                mode="lines+markers",
                line=dict(color=color, width=6 if active else 3),
                marker=dict(symbol="line-ns-open", size=12, color=color),
                name=m.model,
                showlegend=False,
                hovertemplate=f"{state.leader} − {m.model}: [{lo:+.3f}, {up:+.3f}]"
                + (" (missed: current C_t)" if m.missed else "")
                + f"<br>{m.status} after {m.answered:,} questions<extra></extra>",
            )
        )
    fig.add_vline(x=0, line=dict(color="#444", dash="dash", width=1))
    fig.update_yaxes(categoryorder="array", categoryarray=y[::-1])
    fig.update_xaxes(title=f"{state.leader} − model (full-benchmark accuracy difference)")
    saved = getattr(state, "saved", None)
    head = title or f"{state.mode}: each model against the leader {state.leader}"
    sub = f"{state.t:,} questions; {state.generations:,} generations" + (
        f", {saved:,} saved so far" if saved is not None else ""
    )
    return layout(fig, f"{head}<br><sup>{sub}</sup>", height=max(260, 60 + 34 * len(rows)))


def race_replay_figure(modes: Sequence[Any], title: str = "Generations to the answer") -> go.Figure:
    """A replay (engine.analysis.race.RaceReplay.modes: mode, orders with generations,
    joint_stop_generations, fixed_generations): per mode, the race's generations over orders as
    points, beside 8.3's joint stop and the fixed run (log axis)."""
    if not modes:
        return empty_figure("no modes")
    fig = go.Figure()
    for i, m in enumerate(modes):
        color = COLORS.get(m.mode, PALETTE[i % len(PALETTE)])
        for label, key in (
            ("race", "generations"),
            ("8.3 joint stop", "joint_stop_generations"),
            ("fixed run", "fixed_generations"),
        ):
            vals = [getattr(o, key) for o in m.orders]
            fig.add_trace(
                go.Box(
                    y=vals,
                    x=[label] * len(vals),
                    name=m.mode,
                    legendgroup=m.mode,
                    showlegend=label == "race",
                    marker=dict(color=color),
                    boxpoints="all",
                    jitter=0.3,
                    offsetgroup=m.mode,
                    hovertemplate="%{y:,} generations<extra>" + m.mode + "</extra>",
                )
            )
    fig.update_layout(boxmode="group")
    fig.update_yaxes(type="log", title="generations (questions answered × repeats, summed over models)")
    return layout(fig, title)
