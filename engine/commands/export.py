"""``python -m engine export generations``: a run's generations as CSV (stdout or a file) or Parquet."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.commands._common import add_db
from engine.config import EXPORT_FORMATS
from engine.errors import UserError


def register(sub) -> None:
    parser = sub.add_parser("export", help="export stored data to files")
    exp = parser.add_subparsers(dest="export_command", metavar="WHAT")
    exp.required = True
    q = exp.add_parser("generations", help="generations as CSV (stdout by default) or Parquet")
    add_db(q, None)
    q.add_argument("--format", default="csv", help="csv or parquet")
    q.add_argument("--run", default=None, help="only this run id")
    q.add_argument("--out", default=None, help="output file (required for parquet)")
    q.set_defaults(func=run)


def run(args) -> int:
    from engine import store
    if args.format not in EXPORT_FORMATS:
        raise UserError(f"unknown format {args.format!r}; allowed: {', '.join(EXPORT_FORMATS)}")
    if args.format == "parquet" and not args.out:
        raise UserError("--format parquet needs --out FILE (binary output is not written to stdout)")
    df = store.generations_for_export(args.db, args.run)
    if args.format == "csv":
        # CSV has no list type: token ids as one space-separated string
        df["token_ids"] = df["token_ids"].map(lambda v: " ".join(map(str, v)) if v is not None else "")
        if args.out:
            df.to_csv(args.out, index=False)
        else:
            df.to_csv(sys.stdout, index=False)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        df["token_ids"] = df["token_ids"].map(lambda v: [int(t) for t in v] if v is not None else None)
        df.to_parquet(args.out, index=False)
    if args.out:
        print(f"wrote {len(df)} generations to {args.out}", file=sys.stderr)
    return 0
