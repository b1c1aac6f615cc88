"""Rank-sets: prediction-powered ranking from few human and many judge comparisons."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine import figures
from engine.analysis.comparisons import ARENA_JUDGES, default_models

ui.header("Rank-sets", "A rank-set is the set of ranks a model could hold, with probability ≥ 1 − α that every "
                       "model's true rank-set is covered (rank 1 = best).")

src = L.winrate_sources()
options = [("set", s, f"stored set · {s}") for s in src["sets"]]
if L.arena_available():
    options += [("arena", j, f"Chatbot Arena · human + judge {j}") for j in ARENA_JUDGES]
if not options:
    ui.empty_state("No comparisons to rank: upload human (and judge) comparisons on the Upload page. "
                   "PPR needs rows labelled by humans and by a judge.", "upload", "Upload")
    st.stop()

c1, c2, c3 = st.columns([3, 2, 2])
idx = c1.selectbox("Comparisons", range(len(options)), format_func=lambda i: options[i][2], key="rs_source")
source, name, _ = options[idx]
method = c2.radio("Method", ["ppr", "human", "judge"], horizontal=True, key="rs_method",
                  format_func={"ppr": "PPR (human + judge)", "human": "human only", "judge": "judge only"}.get)
covariance = c3.radio("Covariance", ["delta", "paper"], horizontal=True, key="rs_cov",
                      format_func={"delta": "valid (delta method, default)", "paper": "paper's formula (too small)"}.get)
all_models = ui.safe(L.comparison_models, source, name)
if not all_models:
    st.stop()
c4, c5, c6 = st.columns([4, 1, 1])
models = c4.multiselect("Models", all_models, default=default_models(all_models), key=f"rs_models_{source}_{name}")
ctx = ui.export_context("ranksets", set_name=name, models=models)
n = c6.number_input("n human comparisons", min_value=10, value=990, step=10, key="rs_n",
                    help="PPR: the human labels of n random comparisons form the labelled set, the judge "
                         "labels of the others the unlabelled set (also the n of the repeated draws)")
alpha = c5.select_slider("α", [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4], value=0.05, key="rs_alpha")
if len(models) < 2:
    st.info("Choose at least two models.")
    st.stop()
if covariance == "paper":
    st.warning("The paper's covariance Σ̂ = AAᵀ/n² ignores how many comparisons involve each model; its rank-sets "
               "are too narrow and do not reach the 1 − α guarantee. Shown to reproduce the published results.")

tab1, tab2 = st.tabs(["Rank-sets on all comparisons", "Repeated draws (PPR paper, Fig. 3)"])
with tab1:
    view = ui.safe(L.ranksets, source, name, method, float(alpha), covariance=covariance, models=tuple(models),
                   n_human=int(n) if method == "ppr" else None)
    if view is not None:
        r = view["result"]
        st.caption(f"method {method} · covariance {r['covariance']} · n = {r['n']:,} human-labelled, "
                   f"N = {r['N']:,} judge-only" + (f" · λ = {r['lambda']:.3f}" if r.get("lambda") is not None else ""))
        ui.chart(figures.rankset_intervals_figure(view["table"], title=f"Rank-sets at α = {alpha}"),
                 "ranksets", key="rs_int", ctx=ctx)
        ui.table(view["table"], "ranksets", key="rs_table", ctx=ctx)
with tab2:
    st.markdown("Draw **n** human-labelled comparisons (and the rest judge-only) many times; how often is each "
                "rank position in each model's rank-set? (dot size = probability)")
    d2, d3 = st.columns(2)
    reps = d2.number_input("Draws", min_value=5, max_value=1000, value=50, step=5, key="rs_reps")
    seed = d3.number_input("Seed", min_value=0, value=0, key="rs_seed")
    if st.toggle("Run the draws", key="rs_run_draws", help="Draws take a few seconds; results are cached."):
        with st.spinner("Drawing…"):
            dv = ui.safe(L.rankset_draws, source, name, int(n), int(reps), float(alpha), covariance=covariance,
                         seed=int(seed), models=tuple(models))
        if dv is not None:
            res = dv["result"]
            shown = [m for m in ("baseline", "human", "judge", "ppr") if m in res["position_prob"]]
            which = st.radio("Method shown", shown, index=shown.index(method) if method in shown else 0,
                             horizontal=True, key="rs_draw_method")
            ui.chart(figures.rankset_dots_figure(res["position_prob"][which], res["models"],
                                                 title=f"P(rank in rank-set), {which}, α = {alpha}, n = {res['n']}"),
                     f"rank_positions_{which}", key="rs_dots", ctx=ctx)
            ui.chart(figures.tradeoff_figure(dv["curve"]), "size_vs_intersection", key="rs_curve", ctx=ctx)
            ui.table(dv["curve"], "size_vs_intersection", key="rs_curve_table", ctx=ctx)
