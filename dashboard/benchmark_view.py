"""The Benchmark page's coupled-vs-independent analysis (a run with coupled scores and at least 2
repeats per question): the headline figures and one function per tab, each drawing one part of
:class:`engine.analysis.benchmark_result.BenchmarkComparison`.

The page chooses the tabs (``app_pages/benchmark.py``): a new analysis is one render function here
(or in its own module) and one entry in the page's tab list."""

from __future__ import annotations

import streamlit as st

from dashboard import widgets as ui
from engine.analysis.benchmark_result import BenchmarkComparison
from engine.config import MODES
from engine.figures.benchmark import error_curve_figure, kde_figure
from engine.figures.common import interval_figure


def headline(res: BenchmarkComparison, model_a: str, model_b: str, rule: str) -> None:
    """Warnings, the four headline metrics, the paired difference and the sample saving."""
    sd, sci, pc = res.saving_detail, res.saving_ci, res.paired["coupled"]
    for w in res.warnings:  # typed (engine.analysis.notices): few questions, no error level, ...
        st.warning(ui.md_escape(w))
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
        help="Mean over questions of the covariance of the two models' scores over the repeats "
        "(coupled run)",
    )
    m4.metric(
        "Median Var(diff) c / i",
        f"{res.median_var_diff_coupled:.3f} / " + ui.fmt(res.median_var_diff_independent, ".3f"),
        help="Median over questions of the per-question variance of R_A − R_B: coupled / independent",
    )
    st.caption(
        f"Paired difference {ui.md_escape(model_a)} − {ui.md_escape(model_b)}, coupled: {pc.diff:+.3f}, "
        f"95% CI [{pc.ci_low:+.3f}, "
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
            f"*{defs.saving_ci}*: {ui.fmt(sci and sci.saving, '.1%')} "
            f"[{ui.fmt(sci and sci.ci_low, '.1%')}, {ui.fmt(sci and sci.ci_high, '.1%')}]; "
            f"*{defs.saving}*: {ui.fmt(res.saving, '.1%')} "
            f"(n {ui.fmt(sd.n_coupled, '.0f')} vs {ui.fmt(sd.n_independent, '.0f')}), without an interval."
        )
    else:
        s1.metric("Sample saving", "–", help=defs.variance_saving)
        s2.markdown(
            f"At error ε = {sd.error:.4f} ({sd.error_source}), scoring rule **{rule}**. No saving: the "
            "run has no independent scores to compare with (or their difference never varies)."
        )


def covariance_tab(res: BenchmarkComparison, ctx: ui.ExportContext) -> None:
    kde = res.kde
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


def error_tab(res: BenchmarkComparison, ctx: ui.ExportContext) -> None:
    sd = res.saving_detail
    ui.chart(error_curve_figure(res.error_curve, sd.error, sd), "error_curve", key="bm_err", ctx=ctx)
    st.caption(res.error_curve_band)
    ui.table(ui.records(res.error_curve), "error_curve", key="bm_err_table", ctx=ctx)


def paired_tab(res: BenchmarkComparison, ctx: ui.ExportContext) -> None:
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
            title="Accuracy with 95% CI over questions",
            yaxis="accuracy",
        ),
        "accuracy",
        key="bm_acc",
        ctx=ctx,
    )
    ui.table(acc, "accuracy", key="bm_acc_table", ctx=ctx)
    st.caption(
        "Accuracy intervals: the t interval over questions (repeats of a question are one cluster), "
        "and at an all-0 or all-1 score the exact Clopper-Pearson bound (docs/INTERVALS.md)."
    )
    st.markdown(
        "**McNemar on one majority-vote outcome per question** (a model is correct on a question iff it "
        "is right on more than half the repeats). It tests equal majority-vote accuracy, not the "
        "difference above; McNemar over (question, repeat) pairs is not offered (repeats are dependent)."
    )
    ui.table(ui.mcnemar_majority_rows(res), "mcnemar_majority", key="bm_mcn", ctx=ctx)


def planner_tab(res: BenchmarkComparison, ctx: ui.ExportContext) -> None:
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


def without_coupling(modes: list[str], repeats: int) -> str:
    """Why the coupled-vs-independent analysis is not shown for this run, and what is shown instead."""
    if "coupled" not in modes:
        why = "This run has no coupled scores (an imported or independent-only run)"
    else:
        why = (
            f"This run has {ui.plural(repeats, 'repeat')} per question: the per-question covariance, "
            "the variance of the difference, the sample saving and the error curves need at least 2 "
            "repeats per question (Generate with Repeats per prompt ≥ 2)"
        )
    return (
        why + ". Shown: each model's accuracy, the paired comparison over questions with its "
        "planner, and when the run could have stopped (Sequential)."
    )
