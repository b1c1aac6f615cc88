"""Rank-sets: prediction-powered ranking from few human and many judge comparisons."""

import streamlit as st

from dashboard import loaders as L
from dashboard import run_ranksets_view
from dashboard import widgets as ui
from engine import config
from engine.analysis.comparisons import ARENA_PAPER_MODELS, default_models
from engine.analysis.notices import Notice
from engine.analysis.ranksets import PAPER_ALPHAS, THETA_TEXT
from engine.figures.ranks import rankset_dots_figure, rankset_intervals_figure, tradeoff_figure

ui.header(
    "Rank-sets",
    "A rank-set is the set of ranks a model could hold; with probability ≥ 1 − α every model's "
    "true rank lies in its set, simultaneously (max-t; rank 1 = best).",
)

kind = st.radio(
    "Source",
    run_ranksets_view.SOURCE_KINDS,
    index=run_ranksets_view.default_kind(),  # a run with human labels: PPR on it
    horizontal=True,
    key="rs_kind",
)
if kind != run_ranksets_view.SOURCE_KINDS[0]:
    run_ranksets_view.render()
    st.stop()
sources = [s for s in L.comparison_sources() if s.source in ("set", "arena", "judgments")]
if not sources:
    ui.empty_state(
        "No comparisons to rank: judge a run on the Generate page, or upload human (and judge) "
        "comparisons on the Upload page. PPR needs rows labelled by humans and by a judge.",
        "upload",
        "Upload",
    )
    st.stop()


def verdict_source_controls(col, run: str) -> str:
    """A run's judge verdicts as the source: judge labels only, so judge-only rank-sets of one mode."""
    n = L.run_label_count(run)
    col.caption(
        f"Judge verdicts of run {ui.md_code(run)}: judge labels only, so the rank-sets are judge-only. "
        + (
            f"The run has {ui.plural(n, 'human label')}: choose the source "
            f"“{run_ranksets_view.SOURCE_KINDS[1]}” above for PPR with them."
            if n
            else "Label some of its units on the Label page to correct the judge with PPR."
        )
    )
    return col.radio("Generations judged", list(config.MODES), horizontal=True, key="rs_verdict_mode")


c1, c2, c3 = st.columns([3, 2, 2])
idx = c1.selectbox(
    "Comparisons", range(len(sources)), format_func=lambda i: sources[i].label, key="rs_source"
)
source, name = sources[idx].source, sources[idx].name
verdicts = source == "judgments"
judge, mode = (sources[idx].judge, verdict_source_controls(c1, name)) if verdicts else (None, None)
method = c2.radio(
    "Method",
    ["judge"] if verdicts else list(config.RANK_METHODS)[::-1],
    horizontal=True,
    key="rs_method_verdicts" if verdicts else "rs_method",
    format_func={"ppr": "PPR (human + judge)", "human": "human only", "judge": "judge only"}.get,
)
procedure = c3.radio(
    "Procedure",
    list(config.RANK_PROCEDURES),
    horizontal=True,
    key="rs_procedure",
    format_func={
        "maxt": "max-t (simultaneous, default)",
        "marginal": "marginal (per model)",
        "chi2": "χ² (paper's Algorithm 2)",
    }.get,
)
all_models = ui.safe(L.comparison_models, source, name, judge, mode)
if not all_models:
    st.stop()
c4, c5, c6, c7 = st.columns([4, 1, 1, 2])
models = c4.multiselect(
    "Models", all_models, default=default_models(all_models), key=f"rs_models_{source}_{name}"
)
ctx = (
    ui.export_context("ranksets", run=name, models=models)
    if verdicts
    else ui.export_context("ranksets", set_name=name, models=models)
)
if set(ARENA_PAPER_MODELS) <= set(all_models):
    c4.caption(
        f"Default: the paper's {len(ARENA_PAPER_MODELS)} models of the {len(all_models)} in the files "
        "(add the others here)."
    )
n = c6.number_input(
    "n human labels",
    min_value=10,
    value=990,
    step=10,
    key="rs_n",
    disabled=verdicts,
    help="the human labels of n random comparisons (seeded) are kept: PPR's labelled set and the "
    "human-only method use the SAME n labels; PPR's judge-only set is every other comparison",
)
alpha = c5.select_slider("α", sorted(PAPER_ALPHAS), value=0.05, key="rs_alpha")
covariance = c7.radio(
    "Covariance",
    list(config.COVARIANCES),
    horizontal=True,
    key="rs_cov",
    format_func={
        "delta": "valid (delta, clustered by prompt)",
        "paper": "paper's formula (too small)",
    }.get,
)
if len(models) < 2:
    st.info("Choose at least two models.")
    st.stop()
if covariance == "paper":
    st.warning(
        "The paper's covariance Σ̂ = AAᵀ/n² ignores how many comparisons involve each model; its "
        "rank-sets are too narrow and do not reach the 1 − α guarantee. Shown to reproduce the "
        "published results."
    )
if method == "judge":
    st.warning(
        "Judge-only rank-sets rank the JUDGE's preferences: they inherit its biases (e.g. for its own "
        "family, for longer answers) and need not cover the human ranking. PPR corrects the judge with "
        "human labels."
    )
st.caption(THETA_TEXT[0].upper() + THETA_TEXT[1:] + ".")

tab1, tab2 = st.tabs(["Rank-sets on all comparisons", "Repeated draws (PPR paper, Fig. 3)"])
with tab1:
    view = ui.safe(
        L.ranksets,
        source,
        name,
        method,
        float(alpha),
        covariance=covariance,
        models=tuple(models),
        n_human=int(n),
        procedure=procedure,
        judge=judge,
        mode=mode,
    )
    if view is not None:
        r = view.result
        counts = " · ".join(
            f"{m}: n = {c.n:,} human-labelled, N = {c.N:,} judge-only" for m, c in view.counts.items()
        )
        st.caption(
            f"method {method} · procedure {r.procedure} · covariance {r.covariance_detail} · "
            f"{r.clustering} · {counts}" + (f" · λ = {r.lam:.3f}" if r.lam is not None else "")
        )
        for note in r.notes:
            st.caption(ui.md_escape(note))
        for w in r.warnings:
            if w.kind is not Notice.JUDGE_ONLY:  # the judge-only warning is shown above
                st.warning(ui.md_escape(w))
        if view.compare is not None:
            st.markdown(
                "PPR against human-only **on the same human labels** (the judge-only comparisons are "
                "what PPR adds):"
            )
            ui.chart(
                rankset_intervals_figure(view.compare, title=f"Rank-sets at α = {alpha}"),
                "ranksets",
                key="rs_int",
                ctx=ctx,
            )
            ui.table(view.compare, "ranksets_compare", key="rs_cmp_table", ctx=ctx)
        else:
            ui.chart(
                rankset_intervals_figure(view.table, title=f"Rank-sets at α = {alpha}"),
                "ranksets",
                key="rs_int",
                ctx=ctx,
            )
            ui.table(view.table, "ranksets", key="rs_table", ctx=ctx)
with tab2:
    st.markdown(
        "Draw **n** human-labelled comparisons (and the rest judge-only) many times, balanced per pair; "
        "how often is each rank position in each model's rank-set? (dot size = probability). "
        "**Baseline** = the rank-sets from the human labels of ALL comparisons of the same draw (N + "
        "n): the reference the paper's intersection / coverage probabilities are measured against."
    )
    d2, d3 = st.columns(2)
    if verdicts:
        st.info(
            "The repeated draws resample human-labelled comparisons; a run's judge verdicts have none."
        )
        st.stop()
    reps = d2.number_input("Draws", min_value=5, max_value=1000, value=50, step=5, key="rs_reps")
    seed = d3.number_input("Seed", min_value=0, value=0, key="rs_seed")
    if st.toggle(
        "Run the draws",
        key="rs_run_draws",
        help="Draws take seconds (max-t: ~0.3 s per draw on the Arena 12); results are cached.",
    ):
        with st.spinner("Drawing…"):
            dv = ui.safe(
                L.rankset_draws,
                source,
                name,
                int(n),
                int(reps),
                float(alpha),
                covariance=covariance,
                seed=int(seed),
                models=tuple(models),
                procedure=procedure,
            )
        if dv is not None:
            res = dv.result
            st.caption(
                f"procedure {res.procedure} · each draw resamples {res.unit} · per draw n ≈ "
                f"{res.n:,} human-labelled, N ≈ {res.N:,} judge-only"
            )
            shown = [m for m in ("baseline", "human", "judge", "ppr") if m in res.position_prob]
            which = st.radio(
                "Method shown",
                shown,
                index=shown.index(method) if method in shown else 0,
                horizontal=True,
                key="rs_draw_method",
            )
            ui.chart(
                rankset_dots_figure(
                    res.position_prob[which],
                    res.models,
                    title=f"P(rank in rank-set), {which}, α = {alpha}, n = {res.n}",
                ),
                f"rank_positions_{which}",
                key="rs_dots",
                ctx=ctx,
            )
            ui.chart(tradeoff_figure(dv.curve), "size_vs_intersection", key="rs_curve", ctx=ctx)
            ui.table(dv.curve, "size_vs_intersection", key="rs_curve_table", ctx=ctx)
