"""Win-rates: pairwise preferences with prompt-clustered intervals; coupled vs independent paired by
prompt; a stored set's pair per category (simultaneous intervals)."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from dashboard import winrate_slices_view
from engine import config
from engine.analysis.winrates import matrix_of
from engine.figures.common import interval_figure
from engine.figures.winrates import heatmap_figure, pair_bars_figure

ui.header(
    "Win-rates",
    "Win-rate of m over m' = P(m's output preferred); ties count as a non-win for both "
    "and are reported separately. Every interval is a cluster bootstrap over prompts.",
)

sources = L.comparison_sources()
if not sources:
    ui.empty_state(
        "No pairwise comparisons yet: judge a run (`python -m engine judge --run RUN --judge MODEL`) "
        "or upload human comparisons on the Upload page.",
        "upload",
        "Upload",
    )
    st.stop()

c1, c2, c3 = st.columns([3, 1, 1])
idx = c1.selectbox(
    "Comparisons", range(len(sources)), format_func=lambda i: sources[i].label, key="wr_source"
)
src = sources[idx]
ctx = (
    ui.export_context("winrates", run=src.name)
    if src.source == "judgments"
    else ui.export_context("winrates", set_name=src.name)
)
label = c2.radio(
    "Labels",
    list(config.RANK_LABELS),
    horizontal=True,
    key="wr_label",
    disabled=src.source == "judgments",
)
reps = c3.select_slider(
    "Bootstrap resamples",
    [200, 500, 1000, 2000],
    value=1000,
    key="wr_reps",
    help="prompts drawn with replacement, all their comparisons kept; seeded (seed 0)",
)
d1, d2, d3 = st.columns([3, 2, 1])
compare = None
sets = [s.name for s in sources if s.source == "set" and s.name != src.name]
if src.source == "set" and sets:
    choice = d1.selectbox(
        "Compare with another set on the same prompts (paired by prompt)",
        ["(none)"] + sets,
        key="wr_compare",
    )
    compare = None if choice == "(none)" else choice
procedure = d2.radio(
    "Rank-sets behind the rank column",
    list(config.RANK_PROCEDURES),
    horizontal=True,
    key="wr_procedure",
    format_func={"maxt": "max-t (simultaneous)", "marginal": "marginal", "chi2": "χ² (paper)"}.get,
)
with_elo = d3.toggle(
    "Elo",
    value=False,
    key="wr_elo",
    help="online Elo with cluster-bootstrap CIs (the slowest part on large sets; BT is shown always)",
)
with st.spinner("Computing win-rates and cluster-bootstrap intervals…"):
    if src.source == "judgments":
        res = ui.safe(
            L.winrates,
            "judgments",
            src.name,
            judge=src.judge,
            reps=int(reps),
            procedure=procedure,
            elo=with_elo,
        )
    else:
        res = ui.safe(
            L.winrates,
            src.source,
            src.name,
            label=label,
            reps=int(reps),
            compare_name=compare,
            procedure=procedure,
            elo=with_elo,
        )
if res is None:
    st.stop()

groups = res.groups
first = res.results[groups[0]]
parse_note = "".join(
    f" · {m}: {v.unparseable} of {v.total} verdicts unparseable" for m, v in (res.verdicts or {}).items()
)
st.caption(
    f"{ui.md_escape(res.source_note)} · {first.n:,} comparisons · overall tie rate "
    f"{ui.fmt(first.tie_rate, '.1%')}{parse_note}"
)
st.info(f"**{first.clustering}** · {first.ci_method} · {first.rank_method}")
for g in groups:
    for w in res.results[g].warnings:
        st.warning(f"{g}: {ui.md_escape(w)}")

names = ["Average win-rates", "Matrix", "Per pair", "Bradley-Terry / Elo"]
tabs = st.tabs(names + (["By category"] if src.source == "set" else []))
t1, t2, t3, t4 = tabs[:4]
with t1:
    st.markdown(
        "Average win-rate of each model (mean over opponents) with 95% CI; **rank** = lower end of the "
        "rank-set (statistically tied models share a rank)"
        + (", coupled vs independent (paper, Table 1)" if groups == ["coupled", "independent"] else "")
    )
    ui.table(res.table, "average_winrates", key="wr_avg", ctx=ctx)
    ui.chart(
        interval_figure(
            *ui.avg_interval_args(res.table, groups),
            title="Average win-rate (95% CI)",
            yaxis="average win-rate",
        ),
        "average_winrates",
        key="wr_avg_fig",
        ctx=ctx,
    )
with t2:
    for g in groups:
        models, W = matrix_of(res.results[g], "matrix")
        ui.chart(
            heatmap_figure(W, models, title=f"Win-rate of row over column ({g})"),
            f"winrate_matrix_{g}",
            key=f"wr_mat_{g}",
            ctx=ctx,
        )
        models, T = matrix_of(res.results[g], "ties")
        ui.chart(
            heatmap_figure(T, models, title=f"Tie rate ({g})", colorscale="Greys"),
            f"tie_matrix_{g}",
            key=f"wr_tie_{g}",
            ctx=ctx,
        )
with t3:
    pairs = res.pairs
    title = (
        f"Per-pair win-rate, {groups[0]} vs {groups[1]} (95% CI; stars: max-T adjusted paired test, "
        "Holm also listed)"
        if len(groups) > 1
        else f"Per-pair win-rate ({groups[0]}, 95% CI)"
    )
    ui.chart(pair_bars_figure(pairs, groups, title=title), "pair_winrates", key="wr_pairs", ctx=ctx)
    if first.compare_test:
        st.caption(first.compare_test)
    ui.table(pairs, "pair_winrates", key="wr_pairs_table", ctx=ctx)
    for g in groups:
        pb = res.results[g].position_bias
        if pb:
            st.markdown(
                f"**Position bias ({g})**, {pb.n_judgements:,} judgements shown in both orders: the "
                f"verdict flips with the order in {ui.fmt(pb.flip_rate, '.1%')}; the first-shown output "
                f"wins {ui.fmt(pb.first_win_share, '.1%')} of decisive verdicts (95% CI "
                f"{ui.fmt(pb.first_win_low, '.1%')}–{ui.fmt(pb.first_win_high, '.1%')}; 50% = no bias)."
            )
with t4:
    for g in groups:
        bt = res.ratings[g]
        st.markdown(
            f"**{g}** · Bradley-Terry ({res.results[g].bradley_terry.model})"
            + (" and Elo" if "elo" in bt else "")
            + f", {res.results[g].bradley_terry.ci_method}"
        )
        ui.chart(
            interval_figure(
                bt["model"],
                bt["bt_beta"],
                bt["bt_low"],
                bt["bt_high"],
                title=f"Bradley-Terry strength ({g})",
                yaxis="log-strength β",
            ),
            f"bradley_terry_{g}",
            key=f"wr_bt_{g}",
            ctx=ctx,
        )
        ui.table(bt, f"ratings_{g}", key=f"wr_bt_table_{g}", ctx=ctx)
if src.source == "set":
    with tabs[4]:
        winrate_slices_view.render(src.name, res.table["model"].tolist(), res.label)
