"""``python -m engine info``: what the database holds."""

from __future__ import annotations

import json

from engine import store


def register(sub) -> None:
    p = sub.add_parser("info", help="row counts of every table in the database")
    p.add_argument("--db", default=str(store.DEFAULT_DB))
    p.set_defaults(func=run)


def run(args) -> int:
    print(json.dumps(store.table_counts(args.db), indent=2))
    return 0
