"""The Benchmark page's release gate: is B non-inferior to A by a margin M? The decision
(:func:`engine.analysis.gate.gate`, the same call as ``engine gate``), its interval against −M, its table
and the command that makes the same decision in a CI job (docs/GATE.md)."""

from __future__ import annotations

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.figures.gate import gate_figure

BOX = {"non-inferior": st.success, "worse": st.error}


def render(run: str, model_a: str, model_b: str, rule: str) -> None:
    """Draw the gate for baseline ``model_a`` (A) and candidate ``model_b`` (B) on ``run``."""
    c1, c2 = st.columns(2)
    margin = c1.number_input(
        "Margin M",
        min_value=0.0,
        max_value=1.0,
        value=0.01,
        step=0.005,
        format="%.3f",
        key="bm_gate_margin",
        help="How much lower B's accuracy may be than A's and still pass (0.01: one point)",
    )
    alpha = c2.select_slider(
        "α", [0.01, 0.05, 0.1], value=0.05, key="bm_gate_alpha", help="1 − the interval's level"
    )
    res = ui.safe(L.release_gate, run, model_a, model_b, float(margin), float(alpha), rule=rule)
    if res is None:
        return
    BOX.get(res.decision, st.warning)(ui.md_escape(res.text))
    ctx = ui.export_context("benchmark", run=run, models=(model_a, model_b))
    ui.chart(gate_figure(res), "release_gate", key="bm_gate_fig", ctx=ctx)
    ui.table(res.frame(), "release_gate", key="bm_gate_table", ctx=ctx, na_rep="–")
    st.caption(
        f"Baseline A = {ui.md_escape(model_a)}, candidate B = {ui.md_escape(model_b)}: PASS (exit 0) "
        "when the whole interval of B − A "
        "lies above −M, FAIL (exit 1) when it lies below, UNDECIDED (exit 3) otherwise, with the planner's "
        "estimate of how many questions would decide. A finished run: the paired t interval over questions "
        "(METHODS 7.1); a `generate --until` run: its anytime-valid confidence sequence (METHODS 8.2), "
        "valid however often it is asked. The same decision in a CI job (docs/GATE.md):"
    )
    st.code(res.command(L.db_path().name), language="bash")
