"""Racing many models (docs/METHODS.md 8.4) on the dashboard: the Generate page's Race section (start
an ``engine race`` job: goal, α, budget; then a live chart of each model's interval against the
current leader, models that left greyed out, the generations saved so far) and the Benchmark
page's Race tab (a stored run replayed as a race over random orders)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import jobs, refresh
from dashboard import loaders as L
from dashboard import widgets as ui
from engine import config
from engine.errors import UserError
from engine.figures.race import race_intervals_figure, race_replay_figure

GOALS = ("best", "top:M", "ranked")
MODES = ("coupled", "independent", "both")


def race_args(
    models: list[str],
    dataset: str,
    goal: str,
    alpha: float,
    budget: int,
    mode: str,
    seed: int,
    limit: int,
    max_new_tokens: int,
) -> list[str]:
    """The ``python -m engine race`` arguments of the Race form (budget 0: none; limit 0: all)."""
    args = [
        "race",
        "--models",
        *models,
        "--dataset",
        dataset,
        "--goal",
        goal,
        "--alpha",
        str(float(alpha)),
    ]
    args += ["--mode", mode, "--seed", str(int(seed)), "--max-new-tokens", str(int(max_new_tokens))]
    args += ["--db", str(L.db_path())]
    if budget:
        args += ["--budget", str(int(budget))]
    if limit:
        args += ["--limit", str(int(limit))]
    return args


def leave_rows(state) -> pd.DataFrame:
    """Who left when, why, on what evidence (one mode of a race)."""
    return pd.DataFrame(
        [
            {
                "model": lv.model,
                "left after (questions)": lv.after,
                "as": lv.status,
                "evidence": "; ".join(lv.evidence),
            }
            for lv in state.leaves
        ],
        columns=["model", "left after (questions)", "as", "evidence"],
    )


def state_text(state, N: int) -> str:
    head = {
        "decided": f"**decided** after {state.t:,} of {N:,} questions",
        "budget": f"budget reached after {state.t:,} of {N:,} questions: **not decided**",
        "all N questions used": f"all {N:,} questions used (full-run differences, not a sampled decision)",
        "running": f"running: {state.t:,} of {N:,} questions so far",
    }[state.reason]
    return (
        f"**{state.mode}**: {head}; answer: **{', '.join(state.answer) or '(none)'}**; "
        f"{state.generations:,} generations, {state.saved:,} saved so far (a fixed run: "
        f"{state.fixed_generations:,})"
    )


def _start_form(names: list[str], datasets: list[str]) -> None:
    with st.form("race_form", border=True):
        c1, c2 = st.columns([2, 1])
        chosen = c1.multiselect("Models (3 or more)", names, default=names[:3], key="race_models")
        extra = c1.text_input(
            "Other models (space-separated folders, .gguf files or hub ids)", key="race_extra"
        )
        dataset = c2.selectbox("Dataset (with gold answers)", datasets or ["demo"], key="race_dataset")
        limit = c2.number_input(
            "Race: first N prompts (0 = all)", min_value=0, value=0, key="race_limit"
        )
        g1, g2, g3, g4 = st.columns(4)
        goal = g1.selectbox(
            "Goal", GOALS, key="race_goal", help="best: who is best; top:M: the top M; ranked: all pairs"
        )
        m = g1.number_input("M (top:M)", min_value=1, value=1, key="race_m")
        alpha = g2.number_input(
            "α", min_value=0.001, max_value=0.5, value=0.05, step=0.01, format="%.3f", key="race_alpha"
        )
        budget = g3.number_input("Budget (questions; 0 = none)", min_value=0, value=0, key="race_budget")
        mode = g4.selectbox("Mode", MODES, key="race_mode", help="both: each mode races on its own")
        s1, s2 = st.columns(2)
        seed = s1.number_input("Seed (noise and question order)", min_value=0, value=0, key="race_seed")
        max_tokens = s2.number_input(
            "Race: max new tokens",
            min_value=1,
            max_value=4096,
            value=config.DEFAULT_MAX_NEW_TOKENS,
            key="race_tokens",
        )
        go = st.form_submit_button("Start race", icon=":material/sports_score:")
    if not go:
        return
    models = list(chosen) + extra.split()
    if len(set(models)) < 3:
        st.error('A race needs 3 or more models (two: tick "Stop when decided" above instead).')
        return
    spec = f"top:{int(m)}" if goal == "top:M" else goal
    args = race_args(models, dataset, spec, alpha, budget, mode, seed, limit, max_tokens)
    try:
        job = jobs.start_job(
            args, kind="race", db=L.db_path(), env={"COUPLED_EVAL_DB": str(L.db_path())}
        )
    except (UserError, OSError) as exc:  # a message, never a traceback
        st.error(f"Could not start the race: {exc}")
        return
    st.session_state["last_job"] = job
    st.success(f"Started race job `{job}`.")


def render_generate(names: list[str], datasets: list[str]) -> None:
    """The Generate page's Race section: the start form, then the chosen race live."""
    with st.expander(
        "Start a race (3 or more models: stop generating for each once another is shown better)"
    ):
        _start_form(names, datasets)
    runs = L.race_runs()
    if not runs:
        st.caption("No race yet: start one above (or `python -m engine race`).")
        return
    run = st.selectbox("Race", runs, key="gen_race_run")
    runs_df = L.runs()
    running = bool((runs_df.loc[runs_df["run_id"] == run, "status"] == "running").any())

    @st.fragment(run_every=refresh.LIVE_S if running else None)
    def _live():
        state = ui.safe(L.race_state, run)
        if state is None:
            return
        st.caption(
            f"goal {state.goal}, α {state.alpha:g} (each pair at α/P), {len(state.models)} models, "
            f"N = {state.N:,}"
        )
        for m in state.modes:
            st.markdown(state_text(m, state.N))
            ui.chart(
                race_intervals_figure(m),
                "race_live",
                key=f"gen_race_chart_{m.mode}",
                ctx=ui.export_context("generate", run=run),
            )
            if m.leaves:
                ui.table(leave_rows(m), "race_leaves", key=f"gen_race_leaves_{m.mode}")

    _live()


def replay_rows(replay) -> pd.DataFrame:
    """One row per (mode, order): the answer, the end, and the generations against both baselines."""
    return pd.DataFrame(
        [
            {
                "mode": m.mode,
                "seed": o.seed,
                "answer": ", ".join(o.answer),
                "end": o.reason,
                "questions": o.questions,
                "race": o.generations,
                "8.3 joint stop": o.joint_stop_generations,
                "fixed": o.fixed_generations,
            }
            for m in replay.modes
            for o in m.orders
        ]
    )


def summary_rows(replay) -> pd.DataFrame:
    rows = []
    for m in replay.modes:
        s = m.summary()
        rows.append(
            {
                "mode": m.mode,
                "race (median generations)": s["median_generations"],
                "8.3 joint stop": s["median_joint_stop_generations"],
                "fixed": s["fixed_generations"],
                "race / fixed": f"{s['race_vs_fixed']:.2%}",
                "race / joint stop": f"{s['race_vs_joint_stop']:.0%}",
                "decided in": f"{s['decided']} of {len(m.orders)} orders",
            }
        )
    return pd.DataFrame(rows)


def render_replay(run: str, models: list[str], rule: str | None, key: str = "bm_race") -> None:
    """The Benchmark page's Race tab: the stored run replayed as a race over random orders."""
    st.markdown(
        "**Race** (docs/METHODS.md 8.4): every model still in the race answers the next question of "
        "one random order; a model stops generating once another is shown better (each pair's "
        "confidence sequence at α/P). What would it have spent, against every model answering until "
        "the same goal is decided (8.3's joint stop) and the fixed run?"
    )
    if len(models) < 3:
        st.info("A race needs 3 or more models in the run; for two, see the Sequential tab.")
        return
    c1, c2, c3, c4 = st.columns(4)
    chosen = c1.multiselect("Models", models, default=models, key=f"{key}_models")
    goal = c2.text_input("Goal", value="best", key=f"{key}_goal", help="best | top:M | ranked")
    alpha = c3.number_input(
        "α", min_value=0.001, max_value=0.5, value=0.05, step=0.01, format="%.3f", key=f"{key}_alpha"
    )
    n_seeds = c4.slider("Random orders", 1, 40, 20, key=f"{key}_seeds")
    with st.spinner("Replaying the run as a race…"):
        replay = ui.safe(
            L.race_replay,
            run,
            list(chosen),
            goal=goal,
            alpha=float(alpha),
            mode="both",
            repeat=0,
            seeds=tuple(range(int(n_seeds))),
            rule=rule,
        )
    if replay is None:
        return
    ctx = ui.export_context("race", run=run, models=tuple(chosen))
    ui.table(summary_rows(replay), "race_summary", key=f"{key}_summary", ctx=ctx)
    ui.chart(race_replay_figure(replay.modes), "race_replay", key=f"{key}_fig", ctx=ctx)
    ui.table(replay_rows(replay), "race_orders", key=f"{key}_orders", ctx=ctx)
    st.caption(
        "One stored repeat per question (as a live race with one repeat would see it); rounds of 16, "
        "32, 64, 128, then 256 questions. Generations: questions answered, summed over models."
    )
