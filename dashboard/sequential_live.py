"""The Generate page's live view of a ``generate --until`` run: each pair's confidence sequence
against questions seen, both modes on one chart, the zero line, the stop marker and the state
("decided: A > B at question 412 of 14,042" / "undecided: Δ in [..]"). Re-reads the store every
two seconds while the run is running (st.fragment), so it follows a running job's rounds."""

from __future__ import annotations

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.figures.sequential import sequential_cs_figure


def render() -> None:
    runs = L.sequential_runs()
    if not runs:
        st.caption('No sequential run yet: tick "Stop when decided" above to start one.')
        return
    c1, c2 = st.columns([3, 1])
    run = c1.selectbox("Sequential run", runs, key="gen_seq_run")
    pair = c2.number_input(
        "Pair",
        min_value=0,
        value=0,
        step=1,
        key="gen_seq_pair",
        help="0 = the first pair of models (alphabetical), 1 = the next, ...",
    )

    runs_df = L.runs()
    running = bool((runs_df.loc[runs_df["run_id"] == run, "status"] == "running").any())

    @st.fragment(run_every=2.0 if running else None)
    def _live():
        paths = ui.safe(L.live_paths, run, int(pair))
        if not paths:
            return
        for p in paths:
            st.markdown(f"**{p.mode}** ({ui.md_escape(p.pair)}): {ui.md_escape(p.state)}")
        ui.chart(
            sequential_cs_figure(
                paths, title=f"Confidence sequence of {paths[0].pair}, questions so far"
            ),
            "sequential_live",
            key="gen_seq_chart",
            ctx=ui.export_context("generate", run=run),
        )

    _live()
