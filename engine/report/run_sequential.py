"""The run report's sequential section (docs/METHODS.md section 8, docs/SEQUENTIAL.md): for a run made
with ``generate --until``, where it stopped (question n of N, each pair's confidence sequence there,
decided or not, the fixed-n t interval beside it marked not valid for the stopping decision) and the CS
chart; for any other run with enough questions, a replay of the headline pair over seeded question
orders: when could the run have stopped, coupled vs independent.

Numbers come from :mod:`engine.analysis.sequential` only (``live_stop``, ``live_paths``,
``sequential_replay``, ``sequential_paths``)."""

from __future__ import annotations

from engine.analysis.sequential_stop import (  # a stop's words live with its numbers
    LIKE_THESE,
    TARGET_NOTE,
    THIS_BENCHMARK,
    pair_verdict,
)
from engine.figures import sequential as FS
from engine.report import references as ref
from engine.report.context import RunContext
from engine.report.model import Figure, Section, Table, cell, num, pct

MIN_REPLAY_QUESTIONS = 30  # below this a replay cannot decide anything worth showing: no section
REPLAY_ORDERS = 20  # seeded question orders of a replay (seeds ctx.seed .. ctx.seed + 19)
MAX_LIVE_PAIRS = 3  # CS charts of a live run (the table has every pair)
NOT_VALID = "not valid for the stopping decision"

METHODS = (
    "Each pair's difference of accuracy Δ = A − B is followed by a betting confidence sequence (CS) "
    "over the questions in a seeded random order, at level α/P for P pairs (a union bound over pairs), "
    "with the finite-population correction for sampling the N questions without replacement; the CS "
    "holds the true difference at every question at once with probability at least 1 − α, so it stays "
    "valid when the number of questions is chosen by looking at it. The stop rule ('decided': every "
    "pair's CS excludes 0; 'width:W'; 'budget:N') is checked after every question. The fixed-n t "
    "interval on the same questions is shown for reference only: it is valid for a number of questions "
    "fixed in advance, not for one chosen by the stop."
)


def _mode_rows(lm, pairs: tuple[str, ...]) -> list[list]:
    st, rows = lm.state, []
    for p, (name, lo, up, tl, th) in enumerate(zip(pairs, st.lower, st.upper, st.t_low, st.t_high)):
        key = f"seq/{lm.mode}/{name}"
        rows.append(
            [
                cell(lm.mode),
                cell(name),
                cell(f"[{lo:+.4f}, {up:+.4f}]", None, None),
                cell(num(lo, 4), lo, f"{key}/lower"),
                cell(num(up, 4), up, f"{key}/upper"),
                cell(pair_verdict(st, p), None, f"{key}/verdict"),
                cell(f"[{tl:+.4f}, {th:+.4f}]" if tl == tl else "-"),
            ]
        )
    return rows


def _live_section(ctx: RunContext) -> Section | None:
    from engine.analysis.sequential import live_paths, live_stop

    ls = ctx.attempt("sequential stop", live_stop, ctx.db, ctx.run)
    if ls is None or not ls.modes:
        return None
    paras, rows = [], []
    for lm in ls.modes:
        paras.append(
            f"{lm.mode}: {ls.text(lm.mode)}; {lm.n_seen:,} questions generated in this mode "
            f"({pct(lm.n_seen / ls.N)} of the benchmark's {ls.N:,})."
        )
        rows += _mode_rows(lm, ls.pairs)
    head = (
        f"This run was generated with --until {ls.rule} (α {ls.alpha:g}, {ls.pair_alpha:.4g} per pair; "
        f"stop on {'each mode' if ls.mode_stop == 'each' else 'the coupled mode'}; question order seed "
        f"{ls.order_seed}). {TARGET_NOTE}"
    )
    table = Table(
        f"Each pair's confidence sequence at the stop ({len(ls.pairs)} pair(s))",
        [
            "mode",
            "pair",
            f"CS at the stop (about {THIS_BENCHMARK})",
            "lower",
            "upper",
            "at the stop",
            f"t interval (about {LIKE_THESE}; {NOT_VALID})",
        ],
        rows,
        f"CS: anytime-valid at α/P = {ls.pair_alpha:.4g} per pair; where a sequence missed (its running "
        "intersection is empty, probability <= α) its current interval is shown and the pair is not "
        f"decided. The t interval (at the same level, on the same questions) is {NOT_VALID}: it assumes "
        "the number of questions was fixed in advance.",
    )
    figs = []
    for i in range(min(len(ls.pairs), MAX_LIVE_PAIRS)):
        paths = ctx.attempt("sequential chart", live_paths, ctx.db, ctx.run, i)
        if paths:
            figs.append(
                Figure(
                    f"sequential_cs_{i}",
                    FS.sequential_cs_figure(
                        paths, title=f"Confidence sequence of {paths[0].pair} (stored order)"
                    ),
                )
            )
    return Section(
        "sequential",
        "Sequential evaluation: where the run stopped",
        [head, *paras],
        figures=figs,
        tables=[table],
        methods=METHODS,
        references=[ref.METHODS_SEQUENTIAL, ref.WAUDBY_SMITH],
    )


def _replay_table(rep) -> Table:
    rows = []
    for mr in rep.modes:
        s = mr.summary()
        rows.append(
            [
                cell(mr.mode),
                cell(num(mr.n_questions), mr.n_questions),
                cell(num(s["median"], 0), s["median"], f"seq_replay/{mr.mode}/median"),
                cell(f"[{s['q1']:.0f}, {s['q3']:.0f}]"),
                cell(f"{s['min']:.0f} - {s['max']:.0f}"),
                cell(pct(s["fraction_of_N"]), s["fraction_of_N"]),
                cell(f"{s['decided']} / {len(mr.stops)}", s["decided"], f"seq_replay/{mr.mode}/decided"),
                cell(
                    f"{s['all_used']} / {len(mr.stops)}", s["all_used"], f"seq_replay/{mr.mode}/all_used"
                ),
                cell(num(mr.full[0], 4), mr.full[0]),
            ]
        )
    return Table(
        f"Stopping question over {len(rep.seeds)} question orders ({rep.pairs[0]}, stop rule {rep.rule})",
        [
            "mode",
            "questions N",
            "median stop",
            "quartiles",
            "range",
            "median / N",
            "decided before N",
            "all N used",
            "Δ_N (all N questions)",
        ],
        rows,
        "an order where the rule never held counts as N (the whole run was needed); a stop at N is 'all "
        "N used' (the CS is then the point Δ_N: no sampling left), never 'decided'",
    )


def _first_order_table(rep) -> Table:
    rows = []
    for mr in rep.modes:
        st = mr.stops[0]
        rows.append(
            [
                cell(mr.mode),
                cell(
                    num(st.n) if st.n is not None else f"never (N = {mr.n_questions:,})",
                    st.n,
                    f"seq_replay/{mr.mode}/n_first",
                ),
                cell(f"[{st.lower[0]:+.4f}, {st.upper[0]:+.4f}]"),
                cell(pair_verdict(st.state, 0), None, f"seq_replay/{mr.mode}/verdict_first"),
                cell(
                    f"[{st.t_low[0]:+.4f}, {st.t_high[0]:+.4f}]" if st.t_low[0] == st.t_low[0] else "-"
                ),
            ]
        )
    return Table(
        f"Order seed {rep.seeds[0]}: the stop, the CS there and the t interval",
        [
            "mode",
            "stop (question)",
            f"CS at the stop (about {THIS_BENCHMARK})",
            "at the stop",
            f"t interval (about {LIKE_THESE}; {NOT_VALID})",
        ],
        rows,
        f"the t interval on the same questions is {NOT_VALID}",
    )


def _comparison(med: dict) -> str:
    if not {"coupled", "independent"} <= set(med):
        return ""
    c, i = med["coupled"]["median"], med["independent"]["median"]
    here = (
        "the coupled replay stops sooner"
        if c < i
        else "the independent replay stops sooner"
        if i < c
        else "both modes stop at the same median question"
    )
    return (
        "Coupled generation shares the sampling noise, so its confidence sequence can narrow faster; "
        f"in this run {here} (median {c:.0f} vs {i:.0f} questions)."
    )


def _replay_section(ctx: RunContext) -> Section | None:
    from engine.analysis.sequential import sequential_paths, sequential_replay

    s = ctx.summary
    if (
        ctx.pair is None
        or s.n_questions < MIN_REPLAY_QUESTIONS
        or not {"coupled", "independent"} & set(s.modes)
    ):
        return None
    a, b = ctx.pair
    seeds = list(range(ctx.seed, ctx.seed + REPLAY_ORDERS))
    rep = ctx.attempt(
        "sequential replay",
        sequential_replay,
        ctx.db,
        ctx.run,
        models=[a, b],
        mode="both",
        alpha=ctx.alpha,
        seeds=seeds,
        stop="decided",
        rule=s.rule,
    )
    if rep is None:
        return None
    figs = [
        Figure(
            "sequential_replay",
            FS.stopping_times_figure(
                rep.modes, title=f"{a} vs {b}: stopping question over {len(seeds)} random orders"
            ),
            _replay_table(rep),
        )
    ]
    paths = ctx.attempt(
        "sequential replay chart",
        sequential_paths,
        ctx.db,
        ctx.run,
        a,
        b,
        mode="both",
        alpha=ctx.alpha,
        seed=seeds[0],
        rule=s.rule,
    )
    if paths:
        figs.append(
            Figure(
                "sequential_replay_cs",
                FS.sequential_cs_figure(
                    paths, title=f"Confidence sequence of {a} − {b}, order seed {seeds[0]}"
                ),
                _first_order_table(rep),
            )
        )
    med = {mr.mode: mr.summary() for mr in rep.modes}
    sent = "; ".join(
        f"{m}: median {v['median']:.0f} of {rep.mode(m).n_questions:,} questions, decided before N in "
        f"{v['decided']} of {len(seeds)} orders"
        + (
            f" (all {rep.mode(m).n_questions:,} questions used in {v['all_used']})"
            if v["all_used"]
            else ""
        )
        for m, v in med.items()
    )
    return Section(
        "sequential",
        "Sequential replay: when could this run have stopped?",
        [
            "This run used a fixed number of questions. Replayed as a sequential evaluation of the "
            f"headline pair ({a} vs {b}, α {rep.alpha:g}, stop when decided) in {len(seeds)} seeded "
            f"question orders: {sent}. "
            + _comparison(med)
            + " A replay is a what-if on the stored scores (per question, the mean over its repeats); a "
            "live run takes its questions the same way with generate --until. " + TARGET_NOTE
        ],
        figures=figs,
        methods=METHODS + " The replay shuffles the run's questions with each seed (as a live run "
        "does) and reports the first question at which the rule held; its spread over orders is the "
        "stopping time's variability, not a confidence interval.",
        references=[ref.METHODS_SEQUENTIAL, ref.WAUDBY_SMITH, ref.COUPLED],
    )


def sequential_section(ctx: RunContext) -> Section | None:
    """A ``--until`` run: its stop; another run with coupled / independent scores: the replay."""
    from engine.analysis.sequential import sequential_runs

    if ctx.run in sequential_runs(ctx.db):
        return _live_section(ctx)
    return _replay_section(ctx)
