"""CLI layer of the database file: parse the command, call one engine function, print.

``db check``: what a database file is (healthy, damaged, an older/newer schema version, not ours);
``db migrate``: take an older schema version to the current one (backup copy first, one transaction)."""

from __future__ import annotations

from engine.commands._common import add_db, add_output_args, emit, table


def register(sub) -> None:
    p = sub.add_parser("db", help="check a database file or migrate it to this code's schema version")
    dsub = p.add_subparsers(dest="db_command", metavar="ACTION")
    dsub.required = True
    c = dsub.add_parser("check", help="say what the file is: healthy, damaged, its schema version")
    add_db(c)
    add_output_args(c)
    c.set_defaults(func=run_check)
    m = dsub.add_parser(
        "migrate", help="back the file up, then migrate it to the current schema in one transaction"
    )
    add_db(m)
    add_output_args(m)
    m.set_defaults(func=run_migrate)


def run_check(args) -> int:
    from engine import store

    res = store.describe(args.db)

    def summary() -> str:
        rows = [{"table": t, "rows": n} for t, n in res["tables"].items()]
        return res["message"] + ("\n" + table(rows) if rows else "")

    emit(args, res, summary)
    return 0 if res["status"] in ("current", "empty", "missing") else 1


def run_migrate(args) -> int:
    from engine import store

    res = store.migrate(args.db)
    if res["backup"] is None:
        text = f"database {res['db']}: already at schema version {res['to_version']}, nothing to do"
    else:
        text = (
            f"database {res['db']}: migrated from schema version {res['from_version']} to "
            f"{res['to_version']} (backup: {res['backup']})"
        )
    return emit(args, res, text)
