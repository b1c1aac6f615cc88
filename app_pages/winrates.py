"""Win-rates: pairwise preferences, coupled vs independent, Bradley-Terry and Elo."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine import figures
from engine.analysis.winrates import matrix_of

ui.header("Win-rates", "Win-rate of m over m' = P(m's output preferred); ties count as a non-win for both "
                       "and are reported separately.")

src = L.winrate_sources()
options = [("judgments", f"{j['run_id']} · judge {j['judge']}", j) for j in
           ui.unique_by(src["judgments"], ("run_id", "judge"))] + [("set", f"set · {s}", s) for s in src["sets"]]
if not options:
    ui.empty_state("No pairwise comparisons yet: judge a run (`python -m engine judge --run RUN --judge MODEL`) "
                   "or upload human comparisons on the Upload page.", "upload", "Upload")
    st.stop()

c1, c2, c3 = st.columns([3, 1, 1])
idx = c1.selectbox("Comparisons", range(len(options)), format_func=lambda i: options[i][1], key="wr_source")
kind, _, obj = options[idx]
ctx = (ui.export_context("winrates", run=obj["run_id"]) if kind == "judgments"
       else ui.export_context("winrates", set_name=obj))
label = c2.radio("Labels", ["human", "judge"], horizontal=True, key="wr_label", disabled=kind == "judgments")
reps = c3.select_slider("Bootstrap resamples", [50, 100, 200, 500], value=200, key="wr_reps")
compare = None
if kind == "set" and len(src["sets"]) > 1:
    others = ["(none)"] + [s for s in src["sets"] if s != obj]
    compare = st.selectbox("Compare with another set (e.g. verdicts on the independent generations; the first set "
                           "is then shown as 'coupled', this one as 'independent')", others, key="wr_compare")
    compare = None if compare == "(none)" else compare
with st.spinner("Computing win-rates and bootstrap intervals…"):
    if kind == "judgments":
        res = ui.safe(L.winrates, "judgments", obj["run_id"], judge=obj["judge"], reps=int(reps))
    else:
        res = ui.safe(L.winrates, "set", obj, label=label, reps=int(reps), compare_name=compare)
if res is None:
    st.stop()

modes = list(res["results"])
first = res["results"][modes[0]]
st.caption(f"{first['n']:,} comparisons with {res['label']} labels · overall tie rate {ui.fmt(first['tie_rate'], '.1%')}"
           + (" · coupled and independent generations side by side" if len(modes) > 1 else ""))

t1, t2, t3, t4 = st.tabs(["Average win-rates", "Matrix", "Per pair", "Bradley-Terry / Elo"])
with t1:
    st.markdown("Average win-rate of each model (mean over opponents) with 95% CI and rank"
                + (", coupled vs independent (paper, Table 1)" if len(modes) > 1 else ""))
    ui.table(res["table"], "average_winrates", key="wr_avg", ctx=ctx)
    t = res["table"]
    ui.chart(figures.interval_figure(*ui.avg_interval_args(t, modes), title="Average win-rate (95% CI)",
                                     yaxis="average win-rate"), "average_winrates", key="wr_avg_fig", ctx=ctx)
with t2:
    for mode in modes:
        models, W = matrix_of(res["results"][mode], "matrix")
        ui.chart(figures.heatmap_figure(W, models, title=f"Win-rate of row over column ({mode})"),
                 f"winrate_matrix_{mode}", key=f"wr_mat_{mode}", ctx=ctx)
        models, T = matrix_of(res["results"][mode], "ties")
        ui.chart(figures.heatmap_figure(T, models, title=f"Tie rate ({mode})", colorscale="Greys"),
                 f"tie_matrix_{mode}", key=f"wr_tie_{mode}", ctx=ctx)
with t3:
    pairs = res["pairs"]
    ui.chart(figures.pair_bars_figure(pairs), "pair_winrates", key="wr_pairs", ctx=ctx)
    if "stars" in pairs:
        st.caption("Two-tailed two-proportion z-test, coupled vs independent: **** p<1e-4, *** <1e-3, ** <1e-2, * <0.05")
    ui.table(pairs, "pair_winrates", key="wr_pairs_table", ctx=ctx)
with t4:
    for mode in modes:
        bt = ui.rating_rows(res["results"][mode])
        st.markdown(f"**{mode}** · Bradley-Terry ({res['results'][mode]['bradley_terry']['model']}) and Elo, "
                    f"{res['results'][mode]['bradley_terry']['ci_method']}")
        ui.chart(figures.interval_figure(bt["model"], bt["bt_beta"], bt["bt_low"], bt["bt_high"],
                                         title=f"Bradley-Terry strength ({mode})", yaxis="log-strength β"),
                 f"bradley_terry_{mode}", key=f"wr_bt_{mode}", ctx=ctx)
        ui.table(bt, f"ratings_{mode}", key=f"wr_bt_table_{mode}", ctx=ctx)
