"""``python -m engine score --run RUN --rule R``: score every generation of a run."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_db, add_output_args, emit, table


def register(sub) -> None:
    p = sub.add_parser("score", help="score every generation of a run (answer extraction rule)")
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument(
        "--rule",
        default=None,
        choices=config.RULES,
        help="paper: the coupled-generation paper's exact rule; lenient: 'Answer: X', '(B)', option "
        "text; numeric: GSM8K last number; exact: normalised exact match (default: the rule that "
        "fits the run's dataset: numeric sets numeric, the built-in demo lenient, MMLU files paper)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from engine.tasks.scoring import score_run

    res = score_run(args.db, args.run, args.rule)
    if res.get("warning"):
        print(f"warning: {res['warning']}", file=sys.stderr)
    return emit(args, res, lambda: summary(res))


def summary(res: dict) -> str:
    """Mean score per model and mode, then the counts."""
    rows = [
        {"model": r["model"], "mode": r["mode"], "mean score": r["score"]} for r in res["mean_score"]
    ]
    return (
        f"scored {res['n_scored']:,} generations of run {res['run']} with rule {res['rule']} "
        f"({res['n_no_answer']:,} without an extractable answer, {res['n_no_gold']:,} without a gold "
        "answer)\n" + (table(rows) if rows else "no mean score: no generation has a gold answer")
    )
