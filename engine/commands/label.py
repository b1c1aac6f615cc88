"""``python -m engine label sample | import | status | sync``: human labels on a run's own comparisons
(docs/LABELS.md). ``sample`` and ``import`` write only the label files next to the database, so they
work while another job holds its writer lock; ``sync`` copies them into the store as comparison sets."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine import config
from engine.commands._common import _strict_json, add_db, add_output_args, emit, table
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("label", help="human labels on a run's comparisons: sample, import, status, sync")
    inner = p.add_subparsers(dest="label_command", metavar="ACTION")
    inner.required = True
    q = inner.add_parser(
        "sample", help="draw a uniformly random sample of a run's comparison units to label"
    )
    add_db(q)
    q.add_argument("--run", help="the run whose units are sampled (with --mode)")
    q.add_argument("--mode", choices=config.MODES)
    q.add_argument(
        "--set",
        dest="set_name",
        metavar="NAME",
        help="instead of --run/--mode: the units of a stored comparison set made from a run "
        "(e.g. by `comparisons from-judge`; its run's generations are the responses shown)",
    )
    q.add_argument(
        "--n", type=int, required=True, help="sample size (at most the run's units in that mode)"
    )
    q.add_argument("--seed", type=int, required=True, help="the recorded seed of the draw")
    q.add_argument(
        "--share",
        type=float,
        default=0.0,
        help="fraction of the sample also shown to a second labeller (human-human agreement; default 0)",
    )
    q.add_argument(
        "--out",
        help="write the sample as a CSV to label elsewhere (winner column empty); '-': to stdout "
        "(the summary then goes to stderr)",
    )
    q.add_argument("--json", action="store_true", help="print the sample's summary as JSON")
    q.set_defaults(func=run_sample)
    q = inner.add_parser(
        "import", help="bring a filled sample CSV back (its labels join the sample's log)"
    )
    q.add_argument("file")
    add_db(q)
    q.add_argument("--run", required=True)
    q.add_argument("--labeller", help="who labelled the file (when it has no labeller column)")
    q.add_argument("--no-sync", action="store_true", help="do not copy the labels into the database now")
    add_output_args(q)
    q.set_defaults(func=run_import)
    q = inner.add_parser("status", help="labelled / skipped / remaining per sample of a run")
    add_db(q)
    q.add_argument("--run", required=True)
    add_output_args(q)
    q.set_defaults(func=run_status)
    q = inner.add_parser(
        "sync", help="copy a run's label logs into the database as comparison sets (idempotent)"
    )
    add_db(q)
    q.add_argument("--run", required=True)
    add_output_args(q)
    q.set_defaults(func=run_sync)


def _need_db(db: str) -> None:
    if not Path(db).exists():
        raise UserError(f"database not found: {db} (generate a run first)")


def run_sample(args) -> int:
    from engine.tasks.label_sets import sample_csv
    from engine.tasks.labels import make_sample

    _need_db(args.db)
    if args.set_name is None and (args.run is None or args.mode is None):
        raise UserError("label sample: give --run RUN and --mode MODE, or --set NAME")
    if args.set_name is not None and (args.run is not None or args.mode is not None):
        raise UserError(
            "label sample: --set NAME takes its run and mode from the set; leave out --run / --mode"
        )
    s = make_sample(args.db, args.run, args.mode, args.n, args.seed, args.share, set_name=args.set_name)
    if args.out == "-":  # the CSV on stdout for a pipe, like every other --out -
        sys.stdout.write(sample_csv(s))
        sys.stdout.flush()
    elif args.out:
        try:
            Path(args.out).write_text(sample_csv(s), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    res = {k: s[k] for k in ("sample_id", "run", "mode", "seed", "n", "share", "n_units", "models")}
    res["out"] = args.out
    summary = (
        f"sample {s['sample_id']}: {s['n']:,} of {s['n_units']:,} units of run {s['run']} "
        f"({s['mode']}, seed {s['seed']})"
        + (f"; written to {'stdout' if args.out == '-' else args.out}" if args.out else "")
    )
    if args.out == "-":  # stdout holds the CSV: the summary (or --json) goes to stderr
        print(_strict_json(res) if args.json else summary, file=sys.stderr)
        return 0
    quiet = argparse.Namespace(
        **{**vars(args), "out": None}
    )  # --out here is the CSV, not emit's JSON copy
    return emit(quiet, res, summary)


def _try_sync(db: str, run: str) -> str:
    from engine.tasks.label_sets import sync_labels

    try:
        sync_labels(db, run)
    except UserError as exc:
        return (
            f"; not yet in the database ({exc}); the labels are safe in the label log: "
            "run `engine label sync` later"
        )
    return "; copied into the database"


def run_import(args) -> int:
    from engine.tasks.label_sets import import_labels

    _need_db(args.db)
    res = import_labels(args.db, args.file, args.run, args.labeller)
    tail = "" if args.no_sync else _try_sync(args.db, args.run)
    return emit(
        args,
        res,
        f"imported {res['written']:,} answers into sample {res['sample_id']} "
        f"({res['already_there']:,} already there, {res['rows'] - res['answers']:,} rows without one"
        + (
            f", {res['answered_by_others']:,} on units another labeller had already answered: not added"
            if res["answered_by_others"]
            else ""
        )
        + ")"
        + tail,
    )


def run_status(args) -> int:
    from engine.tasks.label_sets import label_status

    _need_db(args.db)
    rows = [s.to_dict() for s in label_status(args.db, args.run)]
    cols = ["sample_id", "mode", "n", "labelled", "skipped", "remaining", "double_labelled"]
    return emit(args, rows, lambda: table(rows, cols))


def run_sync(args) -> int:
    from engine.tasks.label_sets import sync_labels

    _need_db(args.db)
    rows = sync_labels(args.db, args.run)
    print(f"copied {len(rows)} sample(s) of run {args.run} into the database", file=sys.stderr)
    return emit(args, rows, lambda: table(rows, ["set", "n_rows", "labelled", "skipped", "remaining"]))
