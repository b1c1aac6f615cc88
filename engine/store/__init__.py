"""Store layer: the DuckDB file, and the only place with SQL. One schema (:mod:`.schema`: every
table once, ``SCHEMA_VERSION`` and the migrations), one way to connect and to write (:mod:`.db`:
``reader`` yields to a waiting writer, ``writer``, ``transaction`` all or nothing, ``insert_df``),
and one module per table family with typed read and write functions.

* :mod:`.files`        -- what a file is before any connection (header, blocks, a pending WAL)
* :mod:`.runs`         -- runs, datasets, prompts and models rows; settings, warnings, status, export
* :mod:`.generations`  -- generations and token traces (chunk writes, resume reads, trace pages)
* :mod:`.scores`       -- scores, the rule a run was scored with, imported harness runs
* :mod:`.verdicts`     -- LLM-judge verdicts
* :mod:`.comparisons`  -- comparison sets; :mod:`.run_labels` (a run's human-label sets)
* :mod:`.clusters`     -- semantic clusters of a prompt's generations
* :mod:`.design`       -- a run's stored facts for the report's design section
* :mod:`.served`       -- served runs (``engine serve``): open / continue one, the held writer, the
  ``served`` rows of each generation's request; :mod:`.served_links` what an import reads of them;
  :mod:`.journal` the served run's append-only file of answered requests not yet committed
* :mod:`.judge_facts`  -- what the judge audit's bias figures read: response lengths, reported models
* :mod:`.run_models`   -- the order in which the user gave a run's models (every A - B follows it)
* :mod:`.comparison_files`, :mod:`.arena`, :mod:`.jsonl` -- comparison files read and validated
  here (streaming CSV validation, Chatbot Arena JSON lines, one JSON line -> an object), so that
  analyses never reach into ``tasks``
* :mod:`.label_log`    -- human labels outside the database: each sample's file and its append-only,
  fsynced label log next to the database (docs/LABELS.md), folded to at most the labellers each unit
  was drawn for, and each browser tab's heartbeat (a stopped tab's claims are released)
* :mod:`.runlock`      -- one driver per run, one judge process per (run, judge): ``flock``ed files
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
