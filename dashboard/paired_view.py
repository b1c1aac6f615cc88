"""The Benchmark page for a run without coupled scores (an imported harness run): the paired t over
questions and the planner, with the harness's own accuracies beside ours."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui


def render(run: str, model_a: str, model_b: str, rule: str, mde: float) -> None:
    res = ui.safe(L.paired_accuracy, run, model_a, model_b, rule=rule, target_mde=mde)
    if res is None:
        return
    st.info(
        "This run has no coupled scores"
        + (" (imported from a harness)" if res.imported else "")
        + ": the paired comparison over questions and the planner are shown; covariance, sample saving and "
        "error curves need a coupled run."
    )
    p = res.paired
    m1, m2, m3 = st.columns(3)
    m1.metric("Questions × repeats", f"{res.n_questions} × {res.n_repeats}")
    m2.metric(
        "Diff A − B",
        f"{p.diff:+.3f}",
        help=f"95% t CI over questions [{p.ci_low:+.3f}, {p.ci_high:+.3f}], p = {p.p_value:.2g}",
    )
    m3.metric("MDE (80% power)", f"{p.mde:.3f}")
    ctx = ui.export_context("benchmark", run=run, models=res.models)
    ui.table(
        pd.DataFrame(
            {
                "model": list(res.models),
                "accuracy": list(res.accuracy),
                "harness reported": list(res.harness_accuracy),
            }
        ),
        "paired_accuracy",
        key="bm_paired_acc",
        ctx=ctx,
    )
    st.caption(
        f"Planner: questions needed to detect a difference of {res.target_mde:g} at 80% power, α = 0.05."
    )
    ui.table(pd.DataFrame(list(res.plan)), "paired_plan", key="bm_paired_plan", ctx=ctx)
