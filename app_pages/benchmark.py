"""Benchmark comparison of two models: every analysis the run supports. With coupled scores and at
least 2 repeats per question: coupled vs independent (covariance, variance, sample saving with its
interval), the paired difference (questions as the unit), the sample-size planner and the sequential
replay. Otherwise (one repeat, an import, independent only): the accuracies, the paired difference
with its planner, and the sequential replay."""

import streamlit as st

from dashboard import benchmark_view as bv
from dashboard import gate_view, paired_view, race_view, sequential_view, slices_view
from dashboard import loaders as L
from dashboard import widgets as ui
from engine.config import DEFAULT_PLAN_MDE

ui.header(
    "Benchmark comparison",
    "Var_coupled(R_m − R_m') = Var_indep(R_m − R_m') − 2 Cov_coupled(R_m, R_m'): "
    "positively correlated coupled scores need fewer samples for the same error.",
)

ch = L.benchmark_choices()
if not ch.runs:
    ui.empty_state(
        "No scored runs yet: generate a run with two or more models in both modes, then score it "
        "(the Generate page scores by default), or import the paper's MMLU outputs with "
        "`python -m engine import paper-mmlu`.",
        "generate",
        "Generate",
    )
    st.stop()

# 1. what to compare
c1, c2, c3, c4 = st.columns([2, 2, 2, 2])
run = c1.selectbox("Run", ch.runs, key="bm_run")
models = ch.models.get(run, [])
if len(models) < 2:
    st.info(
        f"Run {ui.md_code(run)} has scores for {ui.plural(len(models), 'model')}; the comparison needs two."
    )
    st.stop()
model_a = c2.selectbox("Model A", models, index=0, key="bm_a")
model_b = c3.selectbox("Model B", [m for m in models if m != model_a], index=0, key="bm_b")
modes, repeats = ch.modes.get(run, []), ch.repeats.get(run, 1)
coupling = "coupled" in modes and repeats >= 2  # what the coupled-vs-independent analysis needs
c5, c6, c7, c7b, c8 = st.columns(5)
rule = c5.selectbox("Scoring rule", ch.rules.get(run, ["paper"]), key="bm_rule")
mde = c7.number_input(
    "Planner MDE",
    min_value=0.001,
    max_value=1.0,
    value=DEFAULT_PLAN_MDE,
    step=0.01,
    format="%.3f",
    key="bm_mde",
    help="Minimum detectable accuracy difference A − B for the planner (80% power, α = 0.05)",
)
ctx = ui.export_context("benchmark", run=run, models=(model_a, model_b))

# 2. the tabs this run supports: (title, render) pairs; a new analysis is one more entry
if coupling:
    subject = c4.selectbox("Subject", ["(all)"] + ch.subjects.get(run, []), key="bm_subject")
    target = c6.number_input(
        "Target error (0 = auto)",
        min_value=0.0,
        max_value=1.0,
        value=0.0,
        step=0.005,
        format="%.4f",
        key="bm_target",
        help="The error level of the sample saving. 0: the error the coupled curve reaches at "
        "n = 120 samples, or at n = N/8 when the pool has fewer than 480 samples (near N "
        "the error of sampling without replacement falls to 0)",
    )
    se = c7b.number_input(
        "Planner SE (0 = auto)",
        min_value=0.0,
        max_value=1.0,
        value=0.0,
        step=0.005,
        format="%.4f",
        key="bm_se",
        help="Standard error of the difference the SE plans aim for; 0: the target error / √(2/π)",
    )
    resamples = c8.select_slider(
        "Resamples per size", [100, 200, 500, 1000], value=1000, key="bm_resamples"
    )
    ui.report_button(run, (model_a, model_b), key="bm_report")
    with st.spinner("Computing the comparison…"):
        res = ui.safe(
            L.benchmark,
            model_a,
            model_b,
            subject=None if subject == "(all)" else subject,
            target_error=target or None,
            run=run,
            rule=rule,
            n_resamples=int(resamples),
            target_mde=float(mde),
            target_se=se or None,
        )
    if res is None:
        st.stop()
    bv.headline(res, model_a, model_b, rule)
    tabs = {
        "Covariance & variance": lambda: bv.covariance_tab(res, ctx),
        "Error vs samples": lambda: bv.error_tab(res, ctx),
        "Paired comparison": lambda: bv.paired_tab(res, ctx),
        "Sample-size planner": lambda: bv.planner_tab(res, ctx),
    }
else:
    ui.report_button(run, (model_a, model_b), key="bm_report")
    st.info(bv.without_coupling(modes, repeats))
    tabs = {"Paired comparison": lambda: paired_view.render(run, model_a, model_b, rule, float(mde))}
tabs["Sequential"] = lambda: sequential_view.render(run, model_a, model_b, rule)
# per subject (a harness import: per task): A − B with simultaneous intervals (a forest plot)
by = "subject" if coupling else "task"
tabs[f"Per {by}"] = lambda: slices_view.render(
    run, model_a, model_b, rule, len(ch.subjects.get(run, [])), by
)
tabs["Race"] = lambda: race_view.render_replay(run, models, rule)  # racing all the run's models
# can B ship? non-inferiority of B to A by a margin (engine gate)
tabs["Release gate"] = lambda: gate_view.render(run, model_a, model_b, rule)

for tab, render in zip(st.tabs(list(tabs)), tabs.values()):
    with tab:
        render()
