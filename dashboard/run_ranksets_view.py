"""The Rank-sets page's source "a run's judge verdicts + its human labels": PPR rank-sets next to
judge-only and human-only on the run's own units, and the label planner (docs/JUDGE_AUDIT.md).
Kept in its own module so that the page calls one function."""

from __future__ import annotations

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine import config
from engine.figures.ranks import rankset_intervals_figure

SOURCE_KINDS = ("comparison sets / Arena files", "a run's judge verdicts + its human labels")


def render() -> None:
    """Pick (run, judge), show the three methods' rank-sets and the planner; optionally refresh live."""
    sources = L.audit_sources()
    if not sources:
        ui.empty_state(
            "No run has judge verdicts yet: judge a run (Generate page or `engine judge`), then label "
            "some of its units.",
            "generate",
            "Generate",
        )
        return
    c1, c2, c3 = st.columns([4, 2, 2])
    i = c1.selectbox(
        "Run and judge", range(len(sources)), format_func=lambda j: sources[j].label, key="rr_source"
    )
    src = sources[i]
    alpha = c2.select_slider("α", [0.01, 0.05, 0.1, 0.2], value=0.05, key="rr_alpha")
    procedure = c3.radio("Procedure", list(config.RANK_PROCEDURES), horizontal=True, key="rr_procedure")
    p1, p2, p3 = st.columns([2, 2, 2])
    width = p1.number_input(
        "Plan: rank-sets no wider than", min_value=1, value=1, step=1, key="rr_plan_width"
    )
    ci = p2.number_input(
        "Plan: θ CIs no wider than", min_value=0.0, value=0.1, step=0.01, key="rr_plan_ci"
    )
    live = p3.toggle(
        "Live (refresh every 10 s)", key="rr_live", help="re-read the run's human labels as they arrive"
    )

    @st.fragment(run_every=10 if live else None)
    def body() -> None:
        view = ui.safe(
            L.run_ranksets,
            src.run,
            src.judge,
            alpha=float(alpha),
            procedure=procedure,
            plan_width=int(width),
            plan_ci_width=float(ci) if ci > 0 else None,
        )
        if view is None:
            return
        st.caption(
            f"{ui.plural(view.n_units, 'judged unit')} of run {view.run} · {view.n_labelled:,} with a "
            f"human label ({ui.plural(view.label_count, 'label')} read) · prompts are the clusters"
        )
        for note in view.notes:
            st.info(note)
        if not view.table.empty:
            ui.chart(
                rankset_intervals_figure(view.table, title=f"Rank-sets at α = {alpha}"),
                "run_ranksets",
                key="rr_chart",
            )
            ui.table(view.table, "run_ranksets", key="rr_table")
        if view.plan is not None:
            st.markdown(f"**Planner** (docs/METHODS.md 9.3): {view.plan.text}.")

    body()
