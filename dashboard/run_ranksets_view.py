"""The Rank-sets page's source "a run's judge verdicts + its human labels": PPR rank-sets next to
judge-only and human-only on the run's own units, and the label planner (docs/JUDGE_AUDIT.md).
Kept in its own module so that the page calls one function."""

from __future__ import annotations

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine import config
from engine.analysis.run_ranksets import METHODS_TEXT
from engine.analysis.run_units import AuditSource
from engine.figures.ranks import rankset_intervals_figure

SOURCE_KINDS = ("comparison sets / Arena files", "a run's judge verdicts + its human labels")


def labelled_sources() -> list[AuditSource]:
    """The (run, judge) sources whose run has human labels now (the label log is read live: a label
    given a moment ago counts)."""
    return [s for s in L.audit_sources() if L.run_label_count(s.run) > 0]


def default_kind() -> int:
    """The Source radio's default: a run's verdicts + labels when some run has labels (PPR uses them),
    else the comparison sets."""
    return 1 if labelled_sources() else 0


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
    labelled = {(s.run, s.judge) for s in labelled_sources()}
    first = next((j for j, s in enumerate(sources) if (s.run, s.judge) in labelled), 0)
    c1, c2, c3 = st.columns([4, 2, 2])
    i = c1.selectbox(
        "Run and judge",
        range(len(sources)),
        index=first,
        format_func=lambda j: sources[j].label,
        key="rr_source",
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
        st.markdown(METHODS_TEXT)
        st.caption(
            f"{ui.plural(view.n_units, 'judged unit')} of run {ui.md_code(view.run)} · "
            f"{view.n_labelled:,} with a human label ({ui.plural(view.label_count, 'label')} read) · "
            "prompts are the clusters"
        )
        for note in view.notes:
            st.info(ui.md_escape(note))
        if not view.table.empty:
            ui.chart(
                rankset_intervals_figure(view.table, title=f"Rank-sets at α = {alpha}"),
                "run_ranksets",
                key="rr_chart",
            )
            ui.table(view.table, "run_ranksets", key="rr_table")
            st.caption(
                "theta_low / theta_high: the marginal 1 − α normal interval of θ, intersected with "
                "[0, 1] (θ is a probability, so the intersection keeps its coverage); with few labels "
                "PPR's estimate θ̂ itself can lie outside [0, 1] and is shown as computed (unbiased)."
            )
        if view.plan is not None:
            st.markdown(f"**Planner** (docs/METHODS.md 9.3): {view.plan.text}.")

    body()
