"""Benchmark comparison of two models: coupled vs independent (covariance, variance, sample saving)."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine import figures
from engine.config import MODES

ui.header("Benchmark comparison", "Var_coupled(R_m − R_m') = Var_indep(R_m − R_m') − 2 Cov_coupled(R_m, R_m'): "
                                  "positively correlated coupled scores need fewer samples for the same error.")

ch = L.benchmark_choices()
if not ch["runs"]:
    ui.empty_state("No scored runs yet: generate a run with two or more models in both modes, then score it "
                   "(the Generate page scores by default), or import the paper's MMLU outputs with "
                   "`python -m engine import paper-mmlu`.", "generate", "Generate")
    st.stop()

c1, c2, c3, c4 = st.columns([2, 2, 2, 2])
run = c1.selectbox("Run", ch["runs"], key="bm_run")
models = ch["models"].get(run, [])
if len(models) < 2:
    st.info(f"Run {run} has scores for {len(models)} model(s); the comparison needs two.")
    st.stop()
model_a = c2.selectbox("Model A", models, index=0, key="bm_a")
model_b = c3.selectbox("Model B", [m for m in models if m != model_a], index=0, key="bm_b")
subjects = ["(all)"] + ch["subjects"].get(run, [])
subject = c4.selectbox("Subject", subjects, key="bm_subject")
c5, c6, c7 = st.columns(3)
rule = c5.selectbox("Scoring rule", ch["rules"].get(run, ["paper"]), key="bm_rule")
ctx = ui.export_context("benchmark", run=run, models=(model_a, model_b))
target = c6.number_input("Target error (0 = the coupled error at n = 120)", min_value=0.0, max_value=1.0,
                         value=0.0, step=0.005, format="%.4f", key="bm_target",
                         help="0: the error the coupled curve reaches at n = 120 samples, or at n = N/8 when "
                              "the pool has fewer than 480 samples (near N the error of sampling without "
                              "replacement falls to 0)")
resamples = c7.select_slider("Resamples per size", [100, 200, 500, 1000], value=1000, key="bm_resamples")

with st.spinner("Computing the comparison…"):
    res = ui.safe(L.benchmark, model_a, model_b, subject=None if subject == "(all)" else subject,
                  target_error=target or None, run=run, rule=rule, n_resamples=int(resamples))
if res is None:
    st.stop()

sd = res["saving_detail"]
m1, m2, m3, m4 = st.columns(4)
m1.metric("Questions × repeats", f"{res['n_questions']} × {res['n_repeats']}")
m2.metric("Mean per-question covariance", f"{res['mean_covariance_coupled']:.4f}")
m3.metric("Median Var(diff) coupled / independent",
          f"{res['median_var_diff_coupled']:.3f} / " + ui.fmt(res["median_var_diff_independent"], ".3f"))
m4.metric(f"Sample saving at error {sd['error']:.4f}", ui.fmt(res["saving"], ".1%"),
          help=f"error source: {sd.get('error_source')}; n coupled = {ui.fmt(sd.get('n_coupled'), '.0f')}, "
               f"n independent = {ui.fmt(sd.get('n_independent'), '.0f')}")

t1, t2, t3, t4 = st.tabs(["Covariance & variance", "Error vs samples", "Accuracy & McNemar", "Sample-size planner"])
kde = res["kde"]
with t1:
    ui.chart(figures.kde_figure({"coupled": kde["covariance_coupled"]}, {"coupled": res["mean_covariance_coupled"]},
                                title="Per-question covariance of the scores (coupled)", xaxis="covariance",
                                marker_label="mean"), "covariance_kde", key="bm_cov", ctx=ctx)
    curves = {m: kde[f"var_diff_{m}"] for m in MODES if f"var_diff_{m}" in kde}
    med = {"coupled": res["median_var_diff_coupled"], "independent": res["median_var_diff_independent"]}
    ui.chart(figures.kde_figure(curves, med, title="Per-question variance of the score difference",
                                xaxis="Var(R_A − R_B)", marker_label="median"), "var_diff_kde", key="bm_vd", ctx=ctx)
with t2:
    ui.chart(figures.error_curve_figure(res["error_curve"], sd["error"], sd),
             "error_curve", key="bm_err", ctx=ctx)
    st.caption(res.get("error_curve_band", ""))
    ui.table(ui.records(res["error_curve"]), "error_curve", key="bm_err_table", ctx=ctx)
with t3:
    acc = ui.accuracy_rows(res)
    ui.chart(figures.interval_figure(acc["model"], acc["mu"], acc["ci_low"], acc["ci_high"], acc["mode"],
                                     title="Accuracy with 95% CI (within/between-question variance)",
                                     yaxis="accuracy"), "accuracy", key="bm_acc", ctx=ctx)
    ui.table(acc, "accuracy", key="bm_acc_table", ctx=ctx)
    st.markdown("**McNemar test** (majority = per question, correct on most repeats; pairs = every "
                "(question, repeat), indicative only)")
    ui.table(ui.mcnemar_rows(res), "mcnemar", key="bm_mcn", ctx=ctx)
with t4:
    st.markdown(f"Target error **{res['planner']['target_error']:.4f}** → standard error "
                f"{res['planner']['target_se']:.4f}. {res['planner']['formula']}")
    ui.table(ui.planner_rows(res), "planner", key="bm_plan", ctx=ctx)
