"""The Benchmark page's per-subject / per-task section: A − B per slice with intervals that hold for
all slices at once (max-t) and Benjamini-Hochberg adjusted p-values, as a forest plot and a table."""

from __future__ import annotations

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.figures.slices import forest_figure


def render(
    run: str, model_a: str, model_b: str, rule: str, n_subjects: int, by: str = "subject"
) -> None:
    """Draw the section for ``run`` (nothing to draw below two subjects / tasks: a caption says so)."""
    if n_subjects < 2:
        st.caption(f"Per {by}: this run's prompts carry {n_subjects} {by}(s); slices need at least 2.")
        return
    res = ui.safe(L.slice_comparison, run, model_a, model_b, by=by, rule=rule)
    if res is None:
        return
    for w in res.warnings:
        st.warning(ui.md_escape(w))
    ctx = ui.export_context("benchmark", run=run, models=(model_a, model_b))
    ui.chart(
        forest_figure(res.frame(), res.overall["difference"], res.label, by, 1 - res.alpha),
        f"forest_{by}",
        key="bm_forest",
        ctx=ctx,
    )
    ui.table(res.frame(), f"per_{by}", key="bm_slices", ctx=ctx, na_rep="–")
    st.caption(
        f"{res.label} per {by} ({res.mode}; {res.n_questions:,} questions × {res.n_repeats} repeats). "
        f"Each interval holds for all {len(res.slices)} {by}s at once with probability "
        f"{1 - res.alpha:.0%} (max-t over {by}s, c = {res.critical_value:.2f}; a {by} whose questions all "
        "agree keeps an interval through the Agresti-Min adjustment). p_adjusted: Benjamini-Hochberg "
        "(false discovery rate); p_maxt: family-wise. Dashed: the whole run's difference."
    )
