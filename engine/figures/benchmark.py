"""Figures layer of the benchmark comparison: a result -> Plotly figures.

Benchmark comparison figures (the coupled-generation paper's Fig. 2): KDEs of the per-question
covariance and variance of the difference, error vs number of samples, and the CLI's PNG panels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from engine.figures.common import COLORS, PALETTE, layout


def kde_figure(
    curves: Mapping[str, Any],
    markers: Mapping[str, float | None] | None = None,
    title: str = "",
    xaxis: str = "",
    marker_label: str = "mean",
) -> go.Figure:
    """Density curves (``{label: curve}``, each an ``engine.analysis.stats_records.KdeCurve`` read by
    attribute: x, density, lower) with dashed vertical markers.

    Curves with a ``lower`` bound (a boundary-corrected KDE, e.g. of a variance) start the x axis there.
    """
    fig = go.Figure()
    for i, (label, c) in enumerate(curves.items()):
        color = COLORS.get(label, PALETTE[i % len(PALETTE)])
        fig.add_trace(
            go.Scatter(
                x=c.x,
                y=c.density,
                mode="lines",
                name=label,
                fill="tozeroy",
                line=dict(color=color, width=2),
                opacity=0.6,
            )
        )
        mark = markers.get(label) if markers else None
        if mark is not None:
            v = float(mark)
            fig.add_vline(x=v, line=dict(color=color, dash="dash", width=2))
            # one label per marker, stacked so that close markers do not overprint each other
            fig.add_annotation(
                x=v,
                y=1.0 - 0.09 * i,
                xref="x",
                yref="paper",
                showarrow=False,
                xanchor="left",
                xshift=4,
                font=dict(color=color),
                bgcolor="rgba(255,255,255,0.8)",
                text=f"{marker_label} {label}: {v:.3f}"
                if len(curves) > 1
                else f"{marker_label} = {v:.3f}",
            )
    fig.update_xaxes(title=xaxis)
    lowers = [c.lower for c in curves.values()]
    if curves and all(lo is not None for lo in lowers):
        fig.update_xaxes(
            range=[
                min(float(lo) for lo in lowers if lo is not None),
                max(max(c.x) for c in curves.values()),
            ]
        )
    fig.update_yaxes(title="density")
    return layout(fig, title, height=360, legend=dict(orientation="h", y=-0.2))


def error_curve_figure(
    rows: Sequence[Mapping],
    target_error: float | None = None,
    saving: Any = None,
    title: str = "Estimation error vs number of samples",
) -> go.Figure:
    """Mean absolute error of the estimated difference vs n, per mode, with its band; ``saving`` (a
    ``SavingAt``: n_coupled, n_independent) marks where each curve reaches ``target_error``."""
    df = pd.DataFrame(rows)
    fig = go.Figure()
    for mode in ("coupled", "independent"):
        if mode not in df or df[mode].isna().all():
            continue
        c = COLORS[mode]
        if f"{mode}_low" in df:
            fig.add_trace(
                go.Scatter(
                    x=list(df["n"]) + list(df["n"][::-1]),
                    y=list(df[f"{mode}_high"]) + list(df[f"{mode}_low"][::-1]),
                    fill="toself",
                    fillcolor=c,
                    opacity=0.15,
                    line=dict(width=0),
                    hoverinfo="skip",
                    name=f"{mode} 95% band",
                    showlegend=False,
                )
            )
        fig.add_trace(
            go.Scatter(x=df["n"], y=df[mode], mode="lines", name=mode, line=dict(color=c, width=2))
        )
    if target_error is not None:
        fig.add_hline(
            y=target_error,
            line=dict(color="#495057", dash="dot"),
            annotation_text=f"error {target_error:.4f}",
            annotation_position="top right",
        )
    if saving:
        for mode, key in (("coupled", "n_coupled"), ("independent", "n_independent")):
            n = getattr(saving, key)
            if n is not None and target_error is not None:
                fig.add_trace(
                    go.Scatter(
                        x=[n],
                        y=[target_error],
                        mode="markers",
                        marker=dict(color=COLORS[mode], size=10),
                        name=f"n {mode} = {n:.0f}",
                    )
                )
    fig.update_xaxes(title="number of samples (question, repeat)")
    fig.update_yaxes(title="|estimated − true difference|")
    return layout(fig, title, height=380, legend=dict(orientation="h", y=-0.25))


def write_benchmark_figures(res: Any, folder: str) -> list[str]:
    """The paper's Fig. 2 panels for one benchmark-compare result (an
    ``engine.analysis.benchmark_result.BenchmarkComparison``, read by attribute), as PNG files in
    ``folder``.

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
    fig = go.Figure(
        go.Scatter(x=k.x, y=k.density, mode="lines", name="coupled", line=dict(color=colors["coupled"]))
    )
    fig.add_vline(
        x=res.mean_covariance_coupled,
        line_dash="dash",
        annotation_text=f"mean {res.mean_covariance_coupled:.3f}",
    )
    fig.update_layout(
        title=f"(a) Score covariance per question<br><sub>{title}</sub>",
        xaxis_title="covariance",
        yaxis_title="density",
    )
    paths.append(d / f"{tag}_covariance.png")
    fig.write_image(paths[-1], width=700, height=450)

    fig = go.Figure()
    for mode in ("coupled", "independent"):
        k = getattr(res.kde, f"var_diff_{mode}")
        med = getattr(res, f"median_var_diff_{mode}")
        if k is None or med is None:
            continue
        fig.add_trace(
            go.Scatter(x=k.x, y=k.density, mode="lines", name=mode, line=dict(color=colors[mode]))
        )
        fig.add_vline(
            x=med,
            line_dash="dash",
            line_color=colors[mode],
            annotation_text=f"median {med:.3f}",
            annotation_position="top left" if mode == "coupled" else "top right",
        )
    fig.update_layout(
        title=f"(b) Variance of the score difference per question<br><sub>{title}</sub>",
        xaxis_title="variance of the difference",
        yaxis_title="density",
    )
    paths.append(d / f"{tag}_var_diff.png")
    fig.write_image(paths[-1], width=700, height=450)

    fig = go.Figure()
    n = [r["n"] for r in res.error_curve]
    for mode in ("coupled", "independent"):
        if res.error_curve[0].get(mode) is None:
            continue
        fig.add_trace(
            go.Scatter(
                x=n + n[::-1],
                y=[r[f"{mode}_high"] for r in res.error_curve]
                + [r[f"{mode}_low"] for r in res.error_curve][::-1],
                fill="toself",
                opacity=0.2,
                line=dict(width=0),
                showlegend=False,
                fillcolor=colors[mode],
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=n,
                y=[r[mode] for r in res.error_curve],
                mode="lines",
                name=mode,
                line=dict(color=colors[mode]),
            )
        )
    sd = res.saving_detail
    if sd.saving is not None:
        fig.add_hline(
            y=sd.error,
            line_dash="dot",
            annotation_text=f"error {sd.error:.3f}: {100 * sd.saving:.0f}% fewer samples",
        )
    fig.update_layout(
        title=f"(c) Estimation error vs number of samples (band: 2.5-97.5%)<br><sub>{title}</sub>",
        xaxis_title="number of samples",
        yaxis_title="absolute error",
    )
    paths.append(d / f"{tag}_error_curve.png")
    fig.write_image(paths[-1], width=700, height=450)
    return [str(p) for p in paths]
