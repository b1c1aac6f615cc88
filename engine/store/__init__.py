"""Persistence layer: the DuckDB file. One schema (:mod:`.schema`), one way to connect and to
write (:mod:`.db`: ``reader``, ``writer``, ``transaction``, ``insert_df``), and the run records
(:mod:`.runs`). Tables of one analysis (scores, judgments, comparisons, clusters) are written by
the task that produces them, always through :func:`transaction`.
"""

from engine.config import DEFAULT_DB, MODES, PROJECT_ROOT, WINNERS
from engine.store.db import (
    check_file,
    describe,
    insert_df,
    migrate,
    query_df,
    reader,
    scalar,
    table_counts,
    transaction,
    verify,
    writer,
)
from engine.store.runs import (
    generations_for_export,
    known_runs,
    require_run,
    run_settings,
    run_warnings,
    set_status,
    unknown_run,
)
from engine.store.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION, TABLES, init_schema

__all__ = [
    "DEFAULT_DB",
    "MODES",
    "PROJECT_ROOT",
    "WINNERS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TABLES",
    "MIGRATIONS",
    "init_schema",
    "check_file",
    "verify",
    "migrate",
    "describe",
    "reader",
    "writer",
    "transaction",
    "insert_df",
    "query_df",
    "scalar",
    "table_counts",
    "known_runs",
    "unknown_run",
    "require_run",
    "run_settings",
    "run_warnings",
    "set_status",
    "generations_for_export",
]
