"""The Benchmark page's paired comparison for a run without the coupled-vs-independent analysis (an
imported harness run, an independent-only run, or one repeat per question): each model's accuracy
with its interval, the paired t over questions and the planner, with the harness's own accuracies
beside ours."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.figures.common import interval_figure


def render(run: str, model_a: str, model_b: str, rule: str, mde: float) -> None:
    res = ui.safe(L.paired_accuracy, run, model_a, model_b, rule=rule, target_mde=mde)
    if res is None:
        return
    p = res.paired
    m1, m2, m3 = st.columns(3)
    m1.metric("Questions × repeats", f"{res.n_questions} × {res.n_repeats}")
    m2.metric(
        "Diff A − B",
        f"{p.diff:+.3f}",
        help=f"95% t CI over questions [{p.ci_low:+.3f}, {p.ci_high:+.3f}], p = {p.p_value:.2g}",
    )
    m3.metric("MDE (80% power)", f"{p.mde:.3f}")
    st.caption(
        f"Paired difference {model_a} − {model_b}, {res.mode}: {p.diff:+.3f}, 95% CI "
        f"[{p.ci_low:+.3f}, {p.ci_high:+.3f}] (t over {p.n_questions} questions), p = {p.p_value:.2g}"
    )
    ctx = ui.export_context("benchmark", run=run, models=res.models)
    acc = pd.DataFrame(
        {
            "model": list(res.models),
            "accuracy": list(res.accuracy),
            "ci_low": [c[0] for c in res.accuracy_ci],
            "ci_high": [c[1] for c in res.accuracy_ci],
            "harness reported": list(res.harness_accuracy),
        }
    )
    ui.chart(
        interval_figure(
            acc["model"],
            acc["accuracy"],
            acc["ci_low"],
            acc["ci_high"],
            [res.mode] * len(acc),
            title="Accuracy with 95% CI over questions",
            yaxis="accuracy",
        ),
        "accuracy",
        key="bm_paired_acc_chart",
        ctx=ctx,
    )
    ui.table(acc, "paired_accuracy", key="bm_paired_acc", ctx=ctx)
    st.caption(
        "Accuracy intervals: exact Clopper-Pearson with one 0/1 score per question, otherwise the t "
        "interval over questions (docs/INTERVALS.md), the same as Home and the report."
    )
    st.caption(
        f"Planner: questions needed to detect a difference of {res.target_mde:g} at 80% power, α = 0.05."
    )
    ui.table(pd.DataFrame(list(res.plan)), "paired_plan", key="bm_paired_plan", ctx=ctx)
