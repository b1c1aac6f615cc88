"""``python -m engine info``: what the database holds."""

from __future__ import annotations

import json

from engine.commands._common import add_db


def register(sub) -> None:
    p = sub.add_parser("info", help="row counts of every table in the database")
    add_db(p, None)
    p.set_defaults(func=run)


def run(args) -> int:
    from engine import store
    print(json.dumps(store.table_counts(args.db), indent=2))
    return 0
