"""Benchmark comparison of two models: the paired difference (questions as the unit), coupled vs
independent (covariance, variance, sample saving with its interval) and the sample-size planner."""

import streamlit as st

from dashboard import loaders as L
from dashboard import paired_view, race_view, sequential_view
from dashboard import widgets as ui
from engine.config import DEFAULT_PLAN_MDE, MODES
from engine.figures.benchmark import error_curve_figure, kde_figure
from engine.figures.common import interval_figure

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

c1, c2, c3, c4 = st.columns([2, 2, 2, 2])
run = c1.selectbox("Run", ch.runs, key="bm_run")
models = ch.models.get(run, [])
if len(models) < 2:
    st.info(f"Run {run} has scores for {len(models)} model(s); the comparison needs two.")
    st.stop()
model_a = c2.selectbox("Model A", models, index=0, key="bm_a")
model_b = c3.selectbox("Model B", [m for m in models if m != model_a], index=0, key="bm_b")
subjects = ["(all)"] + ch.subjects.get(run, [])
subject = c4.selectbox("Subject", subjects, key="bm_subject")
c5, c6, c7, c7b, c8 = st.columns(5)
rule = c5.selectbox("Scoring rule", ch.rules.get(run, ["paper"]), key="bm_rule")
ctx = ui.export_context("benchmark", run=run, models=(model_a, model_b))
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
resamples = c8.select_slider("Resamples per size", [100, 200, 500, 1000], value=1000, key="bm_resamples")
ui.report_button(run, (model_a, model_b), key="bm_report")
if "coupled" not in ch.modes.get(
    run, ["coupled"]
):  # imported / independent-only runs: no coupling to show
    paired_view.render(run, model_a, model_b, rule, float(mde))
    with st.expander("Sequential: when could this run have stopped?"):
        sequential_view.render(run, model_a, model_b, rule)
    with st.expander("Race: what would racing all its models have spent?"):
        race_view.render_replay(run, models, rule)
    st.stop()

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

sd, sci, pc = res.saving_detail, res.saving_ci, res.paired["coupled"]
for w in (
    res.warnings
):  # typed (engine.analysis.notices): few questions, no error level, nothing to plan from
    st.warning(w)
m1, m2, m3, m4 = st.columns(4)
m1.metric("Questions × repeats", f"{res.n_questions} × {res.n_repeats}")
m2.metric(
    "Diff A − B (coupled)",
    f"{pc.diff:+.3f}",
    help=f"Mean over questions of the per-question accuracy difference; 95% t CI over questions "
    f"[{pc.ci_low:+.3f}, {pc.ci_high:+.3f}], p = {pc.p_value:.2g}",
)
m3.metric(
    "Mean per-question covariance",
    f"{res.mean_covariance_coupled:.4f}",
    help="Mean over questions of the covariance of the two models' scores over the repeats (coupled run)",
)
m4.metric(
    "Median Var(diff) c / i",
    f"{res.median_var_diff_coupled:.3f} / " + ui.fmt(res.median_var_diff_independent, ".3f"),
    help="Median over questions of the per-question variance of R_A − R_B: coupled / independent",
)
st.caption(
    f"Paired difference {model_a} − {model_b}, coupled: {pc.diff:+.3f}, 95% CI [{pc.ci_low:+.3f}, "
    f"{pc.ci_high:+.3f}] (t over {pc.n_questions} questions), p = {pc.p_value:.2g}"
)

s1, s2 = st.columns([1, 3])
vs, defs = res.variance_saving, res.saving_definitions
if vs is not None and vs.saving is not None:
    s1.metric("Sample saving", f"{vs.saving:.1%}", help=defs.variance_saving)
    s1.markdown(f"{vs.level:.0%} CI **[{ui.fmt(vs.ci_low, '.1%')}, {ui.fmt(vs.ci_high, '.1%')}]**")
    s2.markdown(
        f"**Sample saving {vs.saving:.1%}** = {defs.variance_saving}; CI {vs.method}. "
        f"Other figures, scoring rule **{rule}**, at error ε = {sd.error:.4f} ({sd.error_source}): "
        f"*{defs.saving_ci}*: {ui.fmt(sci and sci.saving, '.1%')} [{ui.fmt(sci and sci.ci_low, '.1%')}, "
        f"{ui.fmt(sci and sci.ci_high, '.1%')}]; *{defs.saving}*: {ui.fmt(res.saving, '.1%')} "
        f"(n {ui.fmt(sd.n_coupled, '.0f')} vs {ui.fmt(sd.n_independent, '.0f')}), without an interval."
    )
else:
    s1.metric("Sample saving", "–", help=defs.variance_saving)
    s2.markdown(
        f"At error ε = {sd.error:.4f} ({sd.error_source}), scoring rule **{rule}**. No saving: the run "
        "has no independent scores to compare with (or their difference never varies)."
    )

t1, t2, t3, t4, t5, t6 = st.tabs(
    [
        "Covariance & variance",
        "Error vs samples",
        "Paired comparison",
        "Sample-size planner",
        "Sequential",
        "Race",
    ]
)
kde = res.kde
with t1:
    ui.chart(
        kde_figure(
            {"coupled": kde.covariance_coupled},
            {"coupled": res.mean_covariance_coupled},
            title="Per-question covariance of the scores (coupled)",
            xaxis="covariance",
            marker_label="mean",
        ),
        "covariance_kde",
        key="bm_cov",
        ctx=ctx,
    )
    curves = {m: c for m in MODES if (c := getattr(kde, f"var_diff_{m}")) is not None}
    med = {"coupled": res.median_var_diff_coupled, "independent": res.median_var_diff_independent}
    ui.chart(
        kde_figure(
            curves,
            med,
            title="Per-question variance of the score difference",
            xaxis="Var(R_A − R_B)",
            marker_label="median",
        ),
        "var_diff_kde",
        key="bm_vd",
        ctx=ctx,
    )
    st.caption(
        "Variance KDEs are reflected at 0 (a variance cannot be negative), so no density falls below 0."
    )
with t2:
    ui.chart(error_curve_figure(res.error_curve, sd.error, sd), "error_curve", key="bm_err", ctx=ctx)
    st.caption(res.error_curve_band)
    ui.table(ui.records(res.error_curve), "error_curve", key="bm_err_table", ctx=ctx)
with t3:
    st.markdown(
        "**Paired difference of accuracy A − B per noise mode** (docs/METHODS.md 7.1): one mean "
        "difference per question, t interval over questions (repeats of a question are not independent "
        "samples); the paired bootstrap over questions is the check; MDE = smallest difference this "
        "design detects with 80% power at α = 0.05; corr = correlation of the two models' per-question "
        "accuracies."
    )
    ui.table(ui.paired_rows(res), "paired_difference", key="bm_paired", ctx=ctx)
    acc = ui.accuracy_rows(res)
    ui.chart(
        interval_figure(
            acc["model"],
            acc["mu"],
            acc["ci_low"],
            acc["ci_high"],
            acc["mode"],
            title="Accuracy with 95% t CI over questions",
            yaxis="accuracy",
        ),
        "accuracy",
        key="bm_acc",
        ctx=ctx,
    )
    ui.table(acc, "accuracy", key="bm_acc_table", ctx=ctx)
    st.markdown(
        "**McNemar on one majority-vote outcome per question** (a model is correct on a question iff it "
        "is right on more than half the repeats). It tests equal majority-vote accuracy, not the "
        "difference above; McNemar over (question, repeat) pairs is not offered (repeats are dependent)."
    )
    ui.table(ui.mcnemar_majority_rows(res), "mcnemar_majority", key="bm_mcn", ctx=ctx)
with t4:
    pl = res.planner
    st.markdown(
        f"Var(d̄) = σ²_b/n + σ²_w/(n k) from this run's variance components (docs/METHODS.md 7.1). "
        f"Plans for a minimum detectable effect **{pl.target_mde:g}** at {pl.power:.0%} power "
        f"(α = {pl.alpha:g}, paired t test), coupled vs independent (measured, and predicted from the "
        f"coupled run)."
    )
    (st.success if pl.headline_fits else st.warning)(pl.headline)
    ui.table(ui.planner_rows(res), "planner_mde", key="bm_plan", ctx=ctx)
    st.markdown(
        f"For a target standard error **{ui.fmt(pl.target_se, '.4f')}** ({pl.target_se_source}):"
    )
    ui.table(ui.planner_rows(res, "se_plans"), "planner_se", key="bm_plan_se", ctx=ctx)
    ui.table(ui.components_rows(res), "variance_components", key="bm_components", ctx=ctx)
with t5:
    sequential_view.render(run, model_a, model_b, rule)
with t6:
    race_view.render_replay(run, models, rule)
