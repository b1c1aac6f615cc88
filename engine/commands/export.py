"""``python -m engine export generations``: a run's generations as CSV or Parquet, written to a file
(``--out FILE``; by default ``generations-RUN.csv`` in the current folder, never overwriting one;
``--out -`` writes CSV to stdout for a pipe)."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.commands._common import add_db
from engine.config import EXPORT_FORMATS
from engine.csvsafe import csv_frame
from engine.errors import UserError


def register(sub) -> None:
    parser = sub.add_parser("export", help="export stored data to files")
    exp = parser.add_subparsers(dest="export_command", metavar="WHAT")
    exp.required = True
    q = exp.add_parser(
        "generations", help="generations as CSV or Parquet, to a file (generations-RUN.csv by default)"
    )
    add_db(q, None)
    q.add_argument("--format", default="csv", help="csv or parquet")
    q.add_argument("--run", default=None, help="only this run id")
    q.add_argument(
        "--out",
        default=None,
        help="output file (default: generations-RUN.csv or .parquet in the current folder, never "
        "overwriting one); '-' writes CSV to stdout",
    )
    q.set_defaults(func=run)


def default_out(run: str | None, fmt: str, folder: Path | None = None) -> Path:
    """``generations-RUN.FMT`` (``generations-all.FMT`` without a run) in ``folder`` (default: the
    current one), with ``-1``, ``-2``, ... added when that file exists."""
    folder = folder or Path.cwd()
    stem = f"generations-{run or 'all'}".replace("/", "-")
    p, n = folder / f"{stem}.{fmt}", 1
    while p.exists():
        p, n = folder / f"{stem}-{n}.{fmt}", n + 1
    return p


def run(args) -> int:
    from engine import store

    if args.format not in EXPORT_FORMATS:
        raise UserError(f"unknown format {args.format!r}; allowed: {', '.join(EXPORT_FORMATS)}")
    if args.format == "parquet" and args.out == "-":
        raise UserError("--format parquet needs --out FILE (binary output is not written to stdout)")
    df = store.generations_for_export(args.db, args.run)
    out = None if args.out == "-" else Path(args.out) if args.out else default_out(args.run, args.format)
    if args.format == "csv":
        # CSV has no list type: token ids as one space-separated string ("" where none are stored,
        # e.g. an imported run: None or pandas' NA)
        df["token_ids"] = df["token_ids"].map(
            lambda v: " ".join(map(str, v)) if hasattr(v, "__iter__") and not isinstance(v, str) else ""
        )
        # no text cell (a model name, an answer) runs as a spreadsheet formula
        csv_frame(df).to_csv(sys.stdout if out is None else out, index=False)
    else:
        assert out is not None
        out.parent.mkdir(parents=True, exist_ok=True)
        df["token_ids"] = df["token_ids"].map(lambda v: [int(t) for t in v] if v is not None else None)
        df.to_parquet(out, index=False)
    if out is not None:
        print(f"wrote {len(df)} generations to {out}")
    return 0
