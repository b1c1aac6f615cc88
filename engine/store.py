"""The DuckDB store: the schema (in this one place), connections, and small typed helpers.

Concurrency model (DuckDB lets one process write *or* several read, never both):

* Exactly one process writes: the engine CLI (a generation, scoring, judging, import or upload
  job). A writer holds the file only for short transactions (:func:`writer`), so that readers
  can get in between two chunks of a long job.
* Readers (the dashboard, ``export``, analyses) open the file read-only for the duration of one
  query batch (:func:`reader`) and retry while a writer holds it. Nobody keeps a connection open.
* Live job progress never goes through the database: it is a JSON file next to it
  (see ``engine.jobs``), so a dashboard can watch a job without touching the lock.

Queries always use parameters (``?``); never format strings from users or widgets into SQL.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from engine.errors import UserError

SCHEMA_VERSION = 1
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# COUPLED_EVAL_DB overrides the default database (the dashboard and tests use it).
DEFAULT_DB = Path(os.environ.get("COUPLED_EVAL_DB", PROJECT_ROOT / "data" / "coupled_eval.duckdb"))
MODES = ("coupled", "independent")
WINNERS = ("a", "b", "tie")  # normalised pairwise outcome; NULL = no label

# Every table of the product. Add columns/tables here only (and bump SCHEMA_VERSION).
SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS meta (
        key VARCHAR PRIMARY KEY,
        value VARCHAR)""",
    # One generation run: all settings (models, dataset, repeats, T, top-k/p, max tokens, modes,
    # seed, system prompt, batch size, device, dtype), the code version and the noise-key mode.
    """CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY,
        created_at TIMESTAMP DEFAULT current_timestamp,
        dataset_id VARCHAR,
        config JSON,
        code_version VARCHAR,
        key_mode VARCHAR,            -- 'token_id' (shared vocabulary) or 'bytes' (hash of token bytes)
        warnings JSON,               -- list of strings (e.g. vocabularies differ)
        status VARCHAR,              -- 'running' | 'done' | 'failed' | 'cancelled'
        n_units INTEGER              -- expected generations = models x prompts x repeats x modes
        )""",
    """CREATE TABLE IF NOT EXISTS models (
        name VARCHAR PRIMARY KEY,    -- the user-facing name, e.g. 'smollm2-135m' or 'smollm2-135m-int8'
        source VARCHAR,              -- folder, hub id or gguf path
        variant VARCHAR,             -- 'base', 'bf16', 'int8', 'int4', 'gguf-q8_0', ...
        vocab_id VARCHAR,            -- identical for models that share one vocabulary
        vocab_size INTEGER,
        config JSON)""",
    """CREATE TABLE IF NOT EXISTS datasets (
        dataset_id VARCHAR PRIMARY KEY,
        source VARCHAR,
        kind VARCHAR,                -- 'multiple_choice' | 'numeric' | 'prompts'
        n_prompts INTEGER,
        created_at TIMESTAMP DEFAULT current_timestamp)""",
    """CREATE TABLE IF NOT EXISTS prompts (
        dataset_id VARCHAR,
        prompt_id VARCHAR,
        idx INTEGER,                 -- order within the dataset
        subject VARCHAR,
        question VARCHAR,
        choices JSON,                -- {"A": ..., "B": ...} for multiple choice, else NULL
        gold VARCHAR,                -- gold answer when known ('A'..'D', a number, a string)
        user_prompt VARCHAR,         -- the exact user message sent to the models
        PRIMARY KEY (dataset_id, prompt_id))""",
    """CREATE TABLE IF NOT EXISTS generations (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,                -- 'coupled' | 'independent'
        seed UBIGINT,                -- the noise seed actually used (shared in coupled mode)
        text VARCHAR,
        token_ids INTEGER[],
        finish_reason VARCHAR,       -- 'eos' | 'length'
        n_tokens INTEGER,
        created_at TIMESTAMP DEFAULT current_timestamp,
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode))""",
    # Per generated token. Noise is not stored: it is recomputed from its key
    # (seed, prompt_id, repeat, step, token key) by engine.sampling.noise.
    """CREATE TABLE IF NOT EXISTS token_traces (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        step INTEGER,
        token_id INTEGER,
        token_text VARCHAR,
        prob FLOAT,                  -- probability of the chosen token under the (masked) distribution
        top_ids INTEGER[],           -- top-k alternatives by probability (NULL when not recorded)
        top_probs FLOAT[],
        top_gumbels FLOAT[],         -- the Gumbel values of those alternatives
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode, step))""",
    """CREATE TABLE IF NOT EXISTS scores (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        rule VARCHAR,                -- 'paper' | 'lenient' | 'numeric' | 'exact'
        extracted VARCHAR,
        score DOUBLE,
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode, rule))""",
    # LLM-as-judge verdicts on pairs of generations of one unit (prompt, repeat, mode).
    """CREATE TABLE IF NOT EXISTS judgments (
        run_id VARCHAR,
        judge VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        model_a VARCHAR,
        model_b VARCHAR,
        presented VARCHAR,           -- 'ab' (model_a shown first) | 'ba'
        judge_prompt_hash VARCHAR,
        raw VARCHAR,                 -- raw judge output
        parsed VARCHAR,              -- 'A' | 'B' | 'tie' | NULL (unparseable), in presentation terms
        winner VARCHAR,              -- 'a' | 'b' | 'tie' | NULL, in model_a/model_b terms
        PRIMARY KEY (run_id, judge, prompt_id, repeat, mode, model_a, model_b, presented))""",
    # Named sets of pairwise comparisons (human uploads, Arena imports, exported judge verdicts).
    """CREATE TABLE IF NOT EXISTS comparison_sets (
        name VARCHAR PRIMARY KEY,
        source VARCHAR,
        created_at TIMESTAMP DEFAULT current_timestamp,
        n_rows INTEGER,
        meta JSON)""",
    """CREATE TABLE IF NOT EXISTS comparisons (
        set_name VARCHAR,
        row_idx INTEGER,
        prompt_id VARCHAR,
        model_a VARCHAR,
        model_b VARCHAR,
        human_winner VARCHAR,        -- 'a' | 'b' | 'tie' | NULL
        judge_winner VARCHAR,        -- 'a' | 'b' | 'tie' | NULL
        PRIMARY KEY (set_name, row_idx))""",
    """CREATE TABLE IF NOT EXISTS clusters (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        method VARCHAR,              -- 'answer' | 'llm' | 'embedding'
        cluster_id INTEGER,
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode, method))""",
)


def init_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table (idempotent) and record the schema version."""
    for ddl in SCHEMA:
        con.execute(ddl)
    con.execute(
        "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
    )


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


@contextlib.contextmanager
def writer(path: str | os.PathLike = DEFAULT_DB, timeout_s: float = 60.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema ensured; released on exit.

    Callers wrap related inserts in ``con.begin()`` / ``con.commit()`` so that a killed process
    leaves either all or none of a chunk.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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


def query_df(path: str | os.PathLike, sql: str, params: list | tuple = ()):
    """Run one parameterised read query and return a pandas DataFrame."""
    with reader(path) as con:
        return con.execute(sql, list(params)).df()


def table_counts(path: str | os.PathLike) -> dict[str, int]:
    """Row count of every table (a cheap overview of what is stored)."""
    out: dict[str, int] = {}
    with reader(path) as con:
        existing = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        for ddl in SCHEMA:
            name = ddl.split("EXISTS", 1)[1].split("(", 1)[0].strip()
            if name in existing:
                out[name] = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]  # name from SCHEMA, not user input
            else:
                out[name] = 0
    return out
