"""``python -m engine info``: what the database holds."""

from __future__ import annotations

from engine.commands._common import add_db, add_output_args, emit, table


def register(sub) -> None:
    p = sub.add_parser("info", help="row counts of every table in the database")
    add_db(p, None)
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from engine import store

    counts = store.table_counts(args.db)
    return emit(
        args,
        counts,
        lambda: f"database {args.db}\n" + table([{"table": k, "rows": v} for k, v in counts.items()]),
    )
