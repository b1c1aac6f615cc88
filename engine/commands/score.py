"""``python -m engine score --run RUN --rule R``: score every generation of a run."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_db, print_json


def register(sub) -> None:
    p = sub.add_parser("score", help="score every generation of a run (answer extraction rule)")
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument("--rule", default=None, choices=config.RULES,
                   help="paper: the coupled-generation paper's exact rule; lenient: 'Answer: X', '(B)', option "
                        "text; numeric: GSM8K last number; exact: normalised exact match (default: the rule that "
                        "fits the run's dataset: numeric sets numeric, the built-in demo lenient, MMLU files paper)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from engine.tasks.scoring import score_run
    res = score_run(args.db, args.run, args.rule)
    if res.get("warning"):
        print(f"warning: {res['warning']}", file=sys.stderr)
    return print_json(res)
