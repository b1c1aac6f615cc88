"""CLI layer of pairwise comparisons: parse the command, call one engine function, print.

``python -m engine comparisons list | delete NAME | export NAME | from-judge``: stored comparison
sets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine import config
from engine.commands._common import add_db, add_output_args, emit, table
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("comparisons", help="stored comparison sets: list, delete, export")
    inner = p.add_subparsers(dest="comparisons_command", metavar="ACTION")
    inner.required = True
    q = inner.add_parser("list", help="every stored set with its row and label counts")
    add_db(q)
    add_output_args(q)
    q.set_defaults(func=run_list)
    q = inner.add_parser("delete", help="delete a set")
    q.add_argument("name")
    add_db(q)
    add_output_args(q)
    q.set_defaults(func=run_delete)
    q = inner.add_parser("export", help="a set as CSV in the upload format (stdout or --out)")
    q.add_argument("name")
    q.add_argument("--out", help="file to write (default, or '-': stdout)")
    add_db(q)
    q.set_defaults(func=run_export)
    q = inner.add_parser("from-judge", help="store a run's judge verdicts as a comparison set")
    add_db(q)
    q.add_argument("--run", required=True)
    q.add_argument("--judge", required=True, help="the judge name stored in the judgments")
    q.add_argument("--mode", choices=config.MODES, required=True)
    q.add_argument("--name", required=True)
    q.add_argument("--combine", default="separate", choices=config.JUDGE_COMBINE)
    q.add_argument("--replace", action="store_true")
    add_output_args(q)
    q.set_defaults(func=run_from_judge)


def run_list(args) -> int:
    from engine.tasks.comparisons import list_comparison_sets

    if not Path(args.db).exists():
        raise UserError(
            f"database not found: {args.db} (import a comparison set or run a generation first)"
        )
    df = list_comparison_sets(args.db)
    rows = df.to_dict("records")
    for r in rows:
        r["meta"] = json.loads(r["meta"]) if r.get("meta") else None
        for k, v in r.items():  # timestamps -> text, so --json stays strict JSON
            if hasattr(v, "isoformat"):
                r[k] = v.isoformat(sep=" ", timespec="seconds")
    cols = [
        c
        for c in ("name", "n_rows", "n_models", "n_human", "n_judge", "created_at", "source")
        if c in df.columns
    ]
    return emit(args, rows, lambda: table(rows, cols) if rows else "no comparison sets stored")


def run_delete(args) -> int:
    from engine.tasks.comparisons import delete_comparison_set

    res = {"deleted": args.name, "n_rows": delete_comparison_set(args.db, args.name)}
    return emit(args, res, f"deleted comparison set {args.name} ({res['n_rows']:,} rows)")


def run_export(args) -> int:
    from engine.tasks.comparisons import export_comparison_set

    out = None if args.out in (None, "-") else args.out
    text = export_comparison_set(args.db, args.name, out)
    if out:
        print(f"exported comparison set {args.name} to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run_from_judge(args) -> int:
    from engine.tasks.judge import judgments_to_set

    res = judgments_to_set(
        args.db, args.run, args.judge, args.mode, args.name, combine=args.combine, replace=args.replace
    )
    return emit(
        args,
        res,
        f"{'replaced' if res['replaced'] else 'stored'} comparison set {res['name']}: "
        f"{res['n_rows']:,} rows from judge {args.judge} on run {args.run} ({args.mode}), "
        f"{res['n_unlabelled']:,} without a label",
    )
