"""The Benchmark page's "Sequential" tab: when could this run have stopped? (docs/SEQUENTIAL.md)

Replays the stored run in random question orders: the distribution of the stopping question per
mode (coupled vs independent) and one order's confidence sequence, both modes on one chart."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from dashboard.summary_view import sequential_lines
from engine.analysis.sequential_stop import TARGET_NOTE, fired_words, pair_verdict
from engine.figures.sequential import sequential_cs_figure, stopping_times_figure

PER_QUESTION = {"mean over the stored repeats": None, "one repeat (as a live run with --repeats 1)": 0}


def summary_rows(replay) -> pd.DataFrame:
    """One row per mode: the stopping question's median and quartiles over the orders, of N."""
    rows = []
    for m in replay.modes:
        s = m.summary()
        rows.append(
            {
                "mode": m.mode,
                "median stop": s["median"],
                "quartiles": f"[{s['q1']:g}, {s['q3']:g}]",
                "of N": m.n_questions,
                "share of N": f"{s['fraction_of_N']:.2%}",
                "decided before N": f"{s['decided']} of {len(m.stops)} orders",
                "all N used": f"{s['all_used']} of {len(m.stops)} orders",
                "Δ_N (A − B, all N questions)": m.full[0],
            }
        )
    return pd.DataFrame(rows)


def stop_rows(replay) -> pd.DataFrame:
    """One row per (mode, order): the stop, the CS there, the t interval (not valid for stopping)."""
    return pd.DataFrame(
        [
            {
                "mode": m.mode,
                "seed": s.seed,
                "stop at": s.n,
                "rule held": fired_words(s.state),
                "CS low": s.lower[0],
                "CS high": s.upper[0],
                "at the stop": pair_verdict(s.state, 0),
                "t low (not valid for stopping)": s.t_low[0],
                "t high (not valid for stopping)": s.t_high[0],
            }
            for m in replay.modes
            for s in m.stops
        ]
    )


def _stored_stop(run: str) -> None:
    """A ``generate --until`` run that stopped before N: the replay below reorders only the questions
    it generated (its N is theirs), so say so beside the run's own stop (Home's and the report's
    words), never a second "N" for the same run without the reason."""
    ls = ui.safe(L.live_stop, run) if run in L.sequential_runs() else None
    note = ls.replay_note() if ls else None
    if note:
        st.info("  \n".join(ui.md_escape(x) for x in [note, *sequential_lines(ls)]))


def render(run: str, model_a: str, model_b: str, rule: str | None, key: str = "bm_seq") -> None:
    st.markdown(
        "**Stop when decided** (docs/METHODS.md section 8): an anytime-valid confidence sequence for "
        "the full-run difference A − B over this benchmark's N questions (Δ_N), valid at every question "
        "at once, so a run may stop as soon as it excludes 0. Here the stored run is replayed in random "
        "question orders; an order that needs all N questions is counted as 'all N used', not decided "
        "(the paired comparison's interval beside this tab is about questions like these)."
    )
    _stored_stop(run)
    c1, c2, c3, c4 = st.columns(4)
    alpha = c1.number_input(
        "α", min_value=0.001, max_value=0.5, value=0.05, step=0.01, format="%.3f", key=f"{key}_alpha"
    )
    n_seeds = c2.slider("Random orders", 1, 40, 20, key=f"{key}_seeds")
    per_q = c3.selectbox("Per question", list(PER_QUESTION), key=f"{key}_perq")
    stop = c4.text_input(
        "Stop rule",
        value="decided",
        key=f"{key}_stop",
        help="decided | width:W | budget:N, comma-separated (the first that holds stops)",
    )
    ctx = ui.export_context("sequential", run=run, models=(model_a, model_b))
    with st.spinner("Replaying the run in random orders…"):
        replay = ui.safe(
            L.sequential_replay,
            run,
            [model_a, model_b],
            mode="both",
            repeat=PER_QUESTION[per_q],
            alpha=float(alpha),
            seeds=list(range(int(n_seeds))),
            stop=stop,
            rule=rule,
        )
    if replay is None:
        return
    ui.table(summary_rows(replay), "sequential_summary", key=f"{key}_summary", ctx=ctx)
    ui.chart(
        stopping_times_figure(replay.modes), "sequential_stopping_times", key=f"{key}_times", ctx=ctx
    )
    seed = st.number_input("Order to draw (seed)", min_value=0, value=0, step=1, key=f"{key}_seed")
    paths = ui.safe(
        L.sequential_paths,
        run,
        model_a,
        model_b,
        mode="both",
        repeat=PER_QUESTION[per_q],
        alpha=float(alpha),
        seed=int(seed),
        stop=stop,
        rule=rule,
    )
    if paths:
        for p in paths:
            st.markdown(f"**{p.mode}**: {ui.md_escape(p.state)}")
        ui.chart(
            sequential_cs_figure(
                paths, title=f"Confidence sequence of {model_a} − {model_b} (order {seed})"
            ),
            "sequential_cs",
            key=f"{key}_cs",
            ctx=ctx,
        )
    ui.table(stop_rows(replay), "sequential_stops", key=f"{key}_stops", ctx=ctx)
    st.caption(
        "The t interval on the same questions is shown for comparison only: it is not valid for a "
        "data-dependent stop (re-checked as the run goes, it misses several times as often as it says; "
        'docs/REPRODUCTION.md, "Sequential evaluation"). ' + TARGET_NOTE
    )
