"""Runs: the unknown-run check, stored settings, warnings and status, and the generations export."""

from __future__ import annotations

import json
import os
from typing import Any

import duckdb
import pandas as pd

from engine.errors import UserError
from engine.store.db import query_df, reader, scalar, writer

RUN_STATUSES = ("running", "done", "failed", "cancelled")


def known_runs(con: duckdb.DuckDBPyConnection, limit: int = 20) -> list[str]:
    """Run ids stored in ``runs`` or with generations (imports may have only the latter), sorted."""
    return [r[0] for r in con.execute(
        "SELECT run_id FROM (SELECT run_id FROM runs UNION SELECT DISTINCT run_id FROM generations) "
        "ORDER BY run_id LIMIT ?", [int(limit)]).fetchall()]


def unknown_run(con: duckdb.DuckDBPyConnection, run_id: str) -> UserError:
    """The one 'unknown run' error: names the run and the stored ones."""
    return UserError(f"unknown run {run_id!r}; known runs: {', '.join(known_runs(con)) or '(none)'}")


def require_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """UserError (:func:`unknown_run`) unless ``run_id`` is in ``runs`` or has generations."""
    if scalar(con, "SELECT count(*) FROM runs WHERE run_id = ?", [run_id]) == 0 and \
            scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [run_id]) == 0:
        raise unknown_run(con, run_id)


def run_settings(db: str | os.PathLike, run_id: str) -> dict[str, Any]:
    """The stored config of a run (UserError listing known runs when absent)."""
    with reader(db) as con:
        row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            raise unknown_run(con, run_id)
    return json.loads(row[0])


def run_warnings(db: str | os.PathLike, run_id: str) -> list[str]:
    """The warnings stored with a run ([] when it has none or is unknown)."""
    df = query_df(db, "SELECT warnings FROM runs WHERE run_id = ?", [run_id])
    return json.loads(df.iloc[0, 0] or "[]") if len(df) else []


def set_status(db: str | os.PathLike, run_id: str, status: str) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; allowed: {', '.join(RUN_STATUSES)}")
    with writer(db) as con:
        con.execute("UPDATE runs SET status = ? WHERE run_id = ?", [status, run_id])


def generations_for_export(db: str | os.PathLike, run_id: str | None = None) -> pd.DataFrame:
    """Generations joined with their prompt (columns: run_id, model, prompt_id, repeat, mode, seed,
    text, finish_reason, n_tokens, token_ids, subject, gold), ordered by run, model, mode, prompt, repeat."""
    sql = """SELECT g.run_id, g.model, g.prompt_id, g.repeat, g.mode, g.seed, g.text, g.finish_reason,
                    g.n_tokens, g.token_ids, p.subject, p.gold
             FROM generations g
             LEFT JOIN runs r USING (run_id)
             LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = g.prompt_id"""
    params: list = []
    if run_id is not None:
        with reader(db) as con:
            require_run(con, run_id)
        sql += " WHERE g.run_id = ?"
        params.append(run_id)
    sql += " ORDER BY g.run_id, g.model, g.mode, p.idx, g.prompt_id, g.repeat"
    return query_df(db, sql, params)
