"""Accuracy ranks: accuracy per model with question-clustered intervals and max-t rank-sets (any scored
run, imported harness runs included)."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.figures.ranks import accuracy_ranks_figure

ui.header(
    "Accuracy ranks",
    "Which model is really best on this benchmark: each model's accuracy with a 95% "
    "interval over questions, and rank-sets that hold for all models at once (max-t, "
    "questions as clusters). Works on generated runs and on runs imported from "
    "lm-evaluation-harness or Inspect AI.",
)

ch = L.benchmark_choices()
runs = [r for r in ch.runs if len(ch.models.get(r, [])) >= 2]
if not runs:
    ui.empty_state(
        "No scored run with two or more models yet: generate and score one, or import harness "
        "results on the Upload page.",
        "upload",
        "Upload",
    )
    st.stop()

c1, c2, c3 = st.columns(3)
run = c1.selectbox("Run", runs, key="ar_run")
modes = ch.modes.get(run, ["coupled"])
mode = c2.selectbox("Mode", modes, key="ar_mode")
level = c3.select_slider("Simultaneous level", [0.8, 0.9, 0.95, 0.99], value=0.95, key="ar_level")
rules = ch.rules.get(run, [])
rule = st.selectbox("Scoring rule", rules, key="ar_rule") if len(rules) > 1 else None

res = ui.safe(L.accuracy_ranksets, run, alpha=round(1 - level, 6), mode=mode, rule=rule)
if res is None:
    st.stop()
m1, m2, m3 = st.columns(3)
m1.metric("Models", len(res.models))
m2.metric("Questions × repeats", f"{res.n_questions} × {res.n_repeats}")
# text, not a metric: a metric's value is cut at the column's edge ("imported (har…")
m3.markdown(
    "**Source**  \n"
    + ("imported from a harness log (not generated here)" if res.imported else "generated here")
)
ctx = ui.export_context("accuracy_ranks", run=run)
ui.chart(
    accuracy_ranks_figure(
        res.figure_frame(),
        level=level,
        title=f"Accuracy ({level:.0%} interval) and simultaneous rank-set per model",
    ),
    "accuracy_ranks",
    key="ar_fig",
    ctx=ctx,
)
ui.table(res.frame(), "accuracy_ranks", key="ar_table", ctx=ctx)
st.caption(
    f"Rank 1 = best. Rank-sets: simultaneous max-t step-down at {level:.0%} (every model's true rank is "
    "in its set with at least that probability). Accuracy intervals: t over questions; repeats of a "
    "question are dependent, so the question is the unit."
    + (
        " 'harness reported' is the harness's own headline number; ours equals it."
        if res.imported
        else ""
    )
)
