"""Connections to the DuckDB file and the one write path (:func:`transaction`, :func:`insert_df`).

Concurrency model (DuckDB lets one process write *or* several read, never both):

* Exactly one process writes: the engine CLI (a generation, scoring, judging, import or upload
  job). A writer holds the file only for short transactions (:func:`transaction`), so that
  readers can get in between two chunks of a long job.
* Readers (the dashboard, ``export``, analyses) open the file read-only for the duration of one
  query batch (:func:`reader`) and retry while a writer holds it. Nobody keeps a connection open.
* Live job progress never goes through the database: it is a JSON file next to it
  (see ``dashboard.jobs``), so a dashboard can watch a job without touching the lock.

Queries always use parameters (``?``); never format strings from users or widgets into SQL.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import duckdb

from engine.config import DEFAULT_DB
from engine.errors import UserError
from engine.store.schema import TABLES, init_schema


def _is_lock_error(exc: Exception) -> bool:
    msg = str(exc).lower()
    return "lock" in msg or "conflicting" in msg or "being used" in msg


def _connect(path: Path, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:  # another process holds the file
            if not _is_lock_error(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def ensure_db_folder(path: str | os.PathLike) -> Path:
    """The folder of a database about to be written: created only for the default location
    (``config.DEFAULT_DB``'s folder); elsewhere a missing folder is a UserError, so a mistyped
    ``--db`` never creates directories."""
    path = Path(path)
    if not path.parent.exists():
        if path.parent.resolve() != Path(DEFAULT_DB).parent.resolve():
            raise UserError(f"the folder of database {str(path)!r} does not exist; create it first or use "
                            f"an existing folder (only the default {str(Path(DEFAULT_DB).parent)!r} is created)")
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def writer(path: str | os.PathLike = DEFAULT_DB, timeout_s: float = 60.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema ensured; released on exit.

    Writes go through :func:`transaction` (all or nothing); this bare connection is for
    statements that need no transaction.
    """
    path = ensure_db_folder(path)
    con = _connect(path, read_only=False, timeout_s=timeout_s)
    try:
        init_schema(con)
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def reader(path: str | os.PathLike = DEFAULT_DB, timeout_s: float = 30.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-only connection. Raises UserError if the file does not exist."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"database not found: {path} (run a generation or an import first)")
    con = _connect(path, read_only=True, timeout_s=timeout_s)
    try:
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def transaction(path: str | os.PathLike = DEFAULT_DB, timeout_s: float = 60.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A :func:`writer` inside BEGIN ... COMMIT: every write of the block is stored, or none.

    Any exception, including KeyboardInterrupt (Ctrl-C, a cancelled job's SIGTERM), rolls back,
    so a killed process never leaves half a chunk, half a score table or half an upload.
    """
    with writer(path, timeout_s) as con:
        con.begin()
        try:
            yield con
            con.commit()
        except BaseException:
            con.rollback()
            raise


def insert_df(con: duckdb.DuckDBPyConnection, table: str, df, columns: Sequence[str],
              casts: Mapping[str, str] | None = None, conflict: str = "") -> None:
    """``INSERT [OR IGNORE | OR REPLACE] INTO table (columns) SELECT columns FROM df``: one set-based
    statement (``executemany`` is slow for a 14k-prompt MMLU run).

    ``casts`` maps a column to a SQL type (DuckDB infers list and JSON columns of a DataFrame as
    generic types). Table and column names come from code, never from users (checked against
    the schema).
    """
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; allowed: {', '.join(TABLES)}")
    if conflict not in ("", "OR IGNORE", "OR REPLACE"):
        raise ValueError(f"conflict must be '', 'OR IGNORE' or 'OR REPLACE', got {conflict!r}")
    view = f"_insert_{table}"
    sel = ", ".join(f"CAST({c} AS {casts[c]})" if casts and c in casts else c for c in columns)
    con.register(view, df)
    try:
        con.execute(f"INSERT {conflict} INTO {table} ({', '.join(columns)}) SELECT {sel} FROM {view}")
    finally:
        con.unregister(view)


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | tuple = ()):
    """The first column of the first row of an aggregate query (``SELECT count(*) ...``)."""
    row = con.execute(sql, list(params)).fetchone()
    if row is None:  # an aggregate always returns a row: this is a bug in the query, not bad input
        raise RuntimeError(f"query returned no row: {sql}")
    return row[0]


def query_df(path: str | os.PathLike, sql: str, params: list | tuple = ()):
    """Run one parameterised read query and return a pandas DataFrame."""
    with reader(path) as con:
        return con.execute(sql, list(params)).df()


def table_counts(path: str | os.PathLike) -> dict[str, int]:
    """Row count of every table (a cheap overview of what is stored)."""
    out: dict[str, int] = {}
    with reader(path) as con:
        existing = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        for name in TABLES:
            if name in existing:
                out[name] = scalar(con, f'SELECT count(*) FROM "{name}"')  # name from SCHEMA, not user input
            else:
                out[name] = 0
    return out
