"""The run report's race section (docs/METHODS.md 8.4): for a run made with ``engine race``, who left
when and on what evidence, each model's confidence sequence against the winner, and what the race
spent; for another run with three or more scored models, the run replayed as a race over a few seeded
orders (what racing would have spent, against 8.3's joint stop and the fixed run).

Numbers come from :mod:`engine.analysis.race` only (``race_state``, ``race_replay``)."""

from __future__ import annotations

from engine.figures import race as FR
from engine.report import references as ref
from engine.report.context import RunContext
from engine.report.model import Figure, Section, Table, cell, num, pct

REPLAY_ORDERS = 5  # seeded orders of a report's replay (the CLI's --replay uses 20)
MIN_QUESTIONS = 30
METHODS_RACING = "docs/METHODS.md section 8.4 (racing many models)"

METHODS = (
    "Racing: every model still in the race answers the next question of one seeded random order (coupled: "
    "with the same noise keys). Each pair of models has a betting confidence sequence (CS) for its "
    "full-benchmark accuracy difference at level α/P, P = k(k − 1)/2, updated while both models are in "
    "the race and frozen when one leaves (a stopped CS stays valid). Goal best: a model leaves once "
    "another is shown better (its pair's CS excludes 0); top M: rejected once M are shown better, "
    "accepted once k − M are shown worse; ranked: once every pair it belongs to is decided. A CS that "
    "missed (empty running intersection) or first excluded 0 only at the last question decides "
    "nothing. With probability at least 1 − α every CS holds at every question, so a truly best model "
    "is never eliminated. Decisions are taken at the end of each round (16, 32, 64, 128, then 256 "
    "questions)."
)


def _leave_table(mode_state) -> Table:
    rows = [
        [
            cell(mode_state.mode),
            cell(lv.model),
            cell(lv.status),
            cell(num(lv.after), lv.after, f"race/{mode_state.mode}/{lv.model}/after"),
            cell("; ".join(lv.evidence)),
        ]
        for lv in mode_state.leaves
    ]
    return Table(
        f"{mode_state.mode}: who left when, on what evidence",
        ["mode", "model", "left as", "after (questions)", "evidence (pair decided at question)"],
        rows,
        "a model answers no more questions once it has left",
    )


def _interval_table(mode_state) -> Table:
    rows = []
    for m in mode_state.models:
        if m.model == mode_state.leader:
            continue
        rows.append(
            [
                cell(m.model),
                cell(m.status),
                cell(num(m.answered), m.answered),
                cell(num(m.mean, 3), m.mean),
                cell(f"[{m.lower:+.4f}, {m.upper:+.4f}]" + (" (missed)" if m.missed else "")),
            ]
        )
    return Table(
        f"{mode_state.mode}: CS of {mode_state.leader} − each model (α/P per pair)",
        ["model", "status", "questions answered", "mean score", "CS of leader − model"],
        rows,
    )


def _live_section(ctx: RunContext) -> Section | None:
    from engine.analysis.race import race_state

    st = ctx.attempt("race", race_state, ctx.db, ctx.run)
    if st is None or not st.modes:
        return None
    paras = [
        f"This run is a race of {len(st.models)} models (goal {st.goal}, α {st.alpha:g}, question order "
        f"seed {st.order_seed}" + (f", budget {st.budget:,} questions" if st.budget else "") + ")."
    ]
    figs, tables = [], []
    for m in st.modes:
        end = {
            "decided": f"decided after {m.t:,} of {st.N:,} questions",
            "budget": f"the budget ended it after {m.t:,} of {st.N:,} questions, not decided",
            "all N questions used": f"all {st.N:,} questions used: full-run differences "
            "(no sampling left), not a sampled decision",
            "running": f"still running ({m.t:,} of {st.N:,} questions so far)",
        }[m.reason]
        paras.append(
            f"{m.mode}: {end}; answer {', '.join(m.answer) or '(none)'}; {m.generations:,} generations "
            f"({pct(m.generations / max(m.fixed_generations, 1))} of the fixed run's "
            f"{m.fixed_generations:,})."
        )
        figs.append(Figure(f"race_{m.mode}", FR.race_intervals_figure(m), _interval_table(m)))
        tables.append(_leave_table(m))
    return Section(
        "race",
        "Race: who left when, on what evidence",
        paras,
        figures=figs,
        tables=tables,
        methods=METHODS,
        references=[METHODS_RACING, ref.WAUDBY_SMITH],
    )


def _replay_table(rep) -> Table:
    rows = []
    for m in rep.modes:
        s = m.summary()
        rows.append(
            [
                cell(m.mode),
                cell(num(m.N), m.N),
                cell(
                    num(s["median_generations"], 0),
                    s["median_generations"],
                    f"race_replay/{m.mode}/race",
                ),
                cell(num(s["median_joint_stop_generations"], 0), s["median_joint_stop_generations"]),
                cell(num(s["fixed_generations"], 0), s["fixed_generations"]),
                cell(pct(s["race_vs_fixed"]), s["race_vs_fixed"]),
                cell(f"{s['decided']} / {len(m.orders)}", s["decided"]),
                cell(", ".join(m.orders[0].answer)),
            ]
        )
    return Table(
        f"Generations over {len(rep.modes[0].orders)} question orders (goal {rep.goal}, one repeat "
        "per question)",
        [
            "mode",
            "questions N",
            "race (median)",
            "8.3 joint stop",
            "fixed run",
            "race / fixed",
            "decided",
            "answer (first order)",
        ],
        rows,
        "8.3 joint stop: every model answers until the same goal is decided (k · n_stop)",
    )


def _replay_section(ctx: RunContext) -> Section | None:
    from engine.analysis.race import race_replay

    s = ctx.summary
    if len(s.models) < 3 or s.n_questions < MIN_QUESTIONS:
        return None
    rep = ctx.attempt(
        "race replay",
        race_replay,
        ctx.db,
        ctx.run,
        goal="best",
        alpha=ctx.alpha,
        mode="both",
        repeat=0,
        seeds=tuple(range(ctx.seed, ctx.seed + REPLAY_ORDERS)),
        rule=s.rule,
    )
    if rep is None:
        return None
    first = rep.modes[0].orders[0]
    left = "; ".join(f"{lv.model} after {lv.after:,} ({'; '.join(lv.evidence)})" for lv in first.leaves)
    return Section(
        "race",
        "Race replay: what would racing these models have spent?",
        [
            f"Replayed as a race (goal {rep.goal}, α {rep.alpha:g}) over {REPLAY_ORDERS} seeded question "
            f"orders, one stored repeat per question. In the first order ({rep.modes[0].mode}): "
            + (left or "no model left")
            + f"; answer {', '.join(first.answer)}."
        ],
        figures=[Figure("race_replay", FR.race_replay_figure(rep.modes), _replay_table(rep))],
        methods=METHODS,
        references=[METHODS_RACING, ref.WAUDBY_SMITH, ref.COUPLED],
    )


def race_section(ctx: RunContext) -> Section | None:
    """An ``engine race`` run: its race; another run with 3 or more scored models: a replay."""
    from engine.analysis.race import race_runs

    if ctx.run in race_runs(ctx.db):
        return _live_section(ctx)
    return _replay_section(ctx)
