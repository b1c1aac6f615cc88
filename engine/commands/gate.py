"""CLI layer of the release gate: parse the command, call one engine function, print.

``python -m engine gate --run RUN --baseline A --candidate B --margin M``: a release gate for CI
(docs/GATE.md). Exit 0 when B is shown non-inferior to A (the whole interval of B − A above −M), 1 when
B is shown worse by more than the margin, 3 when undecided (the planner says about how many more
questions); 2 is bad input, as for every command. Given lm-eval / Inspect log PATHs, imports them first
(as ``report`` does). On a ``generate --until`` run the decision is anytime-valid (its confidence
sequence)."""

from __future__ import annotations

from engine.commands._common import add_db, add_output_args, emit
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "gate",
        help="release gate for CI: exit 0 if the candidate is non-inferior to the baseline by a margin, "
        "1 if worse, 3 if undecided (anytime-valid on a --until run); imports harness logs first",
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="lm-eval output folders / results_*.json or Inspect logs: imported as one run first "
        "(several paths = several models, paired by sample id)",
    )
    add_db(p)
    p.add_argument("--run", default=None, help="a scored run in the database (or give PATHs)")
    p.add_argument(
        "--name", default=None, help="PATHs: the run id of the import (default: harness-<task>)"
    )
    p.add_argument("--baseline", required=True, metavar="A", help="the model in production")
    p.add_argument("--candidate", required=True, metavar="B", help="the model that wants to ship")
    p.add_argument(
        "--margin",
        type=float,
        required=True,
        metavar="M",
        help="how much lower B's accuracy may be and still pass, e.g. 0.01 (one point)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="1 - the interval's level (default 0.05: each wrong decision at most 2.5%%)",
    )
    p.add_argument(
        "--mode", default=None, choices=("coupled", "independent"), help="default: coupled if present"
    )
    p.add_argument("--rule", default=None, help="scoring rule (default: the run's)")
    p.add_argument(
        "--fixed-n",
        action="store_true",
        help="on a --until run, use the fixed-n t interval instead of the confidence sequence (not valid "
        "while the run is still deciding when to stop)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis.gate import gate

    run_id = args.run
    if args.paths:
        if args.run:
            raise UserError("give log PATHs or --run, not both")
        from engine.tasks.harness_import import import_harness

        res = import_harness(args.db, args.paths, name=args.name)
        print(
            f"imported {len(res.models)} model(s) from {res.harness} into {args.db} as run {res.run_id}"
        )
        run_id = res.run_id
    if run_id is None:
        raise UserError("nothing to gate: give --run RUN or lm-eval / Inspect log PATHs")
    out = gate(
        args.db,
        run_id,
        args.baseline,
        args.candidate,
        args.margin,
        alpha=args.alpha,
        mode=args.mode,
        rule=args.rule,
        anytime=False if args.fixed_n else None,
    )
    emit(args, out.to_dict(), out.text)
    return out.exit_code
