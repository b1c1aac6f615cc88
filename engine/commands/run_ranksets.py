"""CLI layer of a run's rank-sets: parse the command, call one engine function, print.

``python -m engine run-ranksets --run RUN --judge J``: PPR rank-sets on a run's own judge verdicts and
human labels, next to judge-only and human-only, and the label planner (``--plan-width W``: about how
many more labels for rank-sets no wider than W; ``--plan-ci X``: for theta CIs no wider than X).
docs/JUDGE_AUDIT.md."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_db, add_output_args, add_run_label_args, emit, table


def register(sub) -> None:
    p = sub.add_parser(
        "run-ranksets",
        help="PPR rank-sets of a run (judge verdicts + its human labels) next to "
        "judge-only and human-only, with the label planner",
    )
    add_db(p)
    add_run_label_args(p, "the judge whose verdicts PPR corrects")
    p.add_argument(
        "--alpha", type=float, default=0.05, help="rank-sets hold simultaneously with prob. >= 1 - alpha"
    )
    p.add_argument("--procedure", default="maxt", choices=config.RANK_PROCEDURES)
    p.add_argument(
        "--plan-width",
        type=int,
        metavar="W",
        help="planner: more labels for rank-sets no wider than W ranks",
    )
    p.add_argument(
        "--plan-ci", type=float, metavar="X", help="planner: more labels for theta CIs no wider than X"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the max-t draws")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis.run_ranksets import run_ranksets

    res = run_ranksets(
        args.db,
        args.run,
        args.judge,
        human=args.human,
        mode=args.mode,
        alpha=args.alpha,
        procedure=args.procedure,
        seed=args.seed,
        plan_width=args.plan_width,
        plan_ci_width=args.plan_ci,
    )
    return emit(args, res.to_dict(), lambda: summary(res))


def summary(res) -> str:
    head = (
        f"rank-sets of run {res.run} · judge {res.judge} · mode {res.mode or 'all'} · {res.n_units:,} "
        f"judged units, {res.n_labelled:,} with a human label"
    )
    rows = [
        {
            "method": r.method,
            "model": r.model,
            "rank_set": f"{r.lower}-{r.upper}",
            "theta": r.theta,
            "theta_low": r.theta_low,
            "theta_high": r.theta_high,
        }
        for r in res.table.itertuples()
    ]
    lines = [head, "", table(rows)] if rows else [head]
    if res.plan is not None:
        lines += ["", f"planner: {res.plan.text}"]
    lines += [f"note: {n}" for n in res.notes]
    return "\n".join(lines)
