"""The Generate page's live view of a ``generate --until`` run: each pair's confidence sequence
against questions seen, both modes on one chart, the zero line, the stop marker and the state in words
(engine.analysis.sequential_stop: "decided: A > B at question 412 of 14,042", "not decided: ...",
"all 40 questions used: full-run difference Δ_N ...", each saying its target).

The whole section is a fragment that re-reads the store every 2 s while a job runs (every 10 s
otherwise): it follows a running job's rounds, and a run started on this page (or anywhere) appears
and is selected when its first round is stored, with no page reload."""

from __future__ import annotations

import streamlit as st

from dashboard import jobs_panel, refresh
from dashboard import loaders as L
from dashboard import widgets as ui
from engine.analysis.sequential_stop import TARGET_NOTE
from engine.figures.sequential import sequential_cs_figure


def _follow_new(runs: list[str]) -> None:
    """Select the newest run when one appears that this session has not seen yet (a run just started)."""
    known = st.session_state.get("_gen_seq_known")
    if known is not None and runs[0] not in known:
        st.session_state["gen_seq_run"] = runs[0]
    st.session_state["_gen_seq_known"] = list(runs)


def _section() -> None:
    runs = L.sequential_runs()
    if not runs:
        st.session_state["_gen_seq_known"] = []
        st.caption(
            'No sequential run yet: tick "Stop when decided" above to start one (it appears here when '
            "its first round is scored)."
        )
        return
    _follow_new(runs)
    c1, c2 = st.columns([3, 1])
    run = c1.selectbox("Sequential run", runs, key="gen_seq_run")
    pair = c2.number_input(
        "Pair",
        min_value=0,
        value=0,
        step=1,
        key="gen_seq_pair",
        help="0 = the first pair of the run's models, 1 = the next, ...",
    )
    paths = ui.safe(L.live_paths, run, int(pair))
    if not paths:
        return
    for p in paths:
        st.markdown(
            f"**{p.mode}**: {ui.md_escape(p.summary)}.  \n{ui.md_escape(f'{p.pair}: {p.state}')}"
        )
    ui.chart(
        sequential_cs_figure(paths, title=f"Confidence sequence of {paths[0].pair}, questions so far"),
        "sequential_live",
        key="gen_seq_chart",
        ctx=ui.export_context("generate", run=run),
    )
    st.caption(TARGET_NOTE)


def render() -> None:
    @st.fragment(run_every=refresh.period(jobs_panel.any_job_running()))
    def _live() -> None:
        _section()

    _live()
