"""The schema of every table, in this one place (add columns/tables here only, and bump SCHEMA_VERSION).

A change of schema is a new ``SCHEMA_VERSION`` plus one step in :data:`MIGRATIONS` (the SQL that
takes a database of the previous version to the new one). :func:`init_schema` never changes a
database it did not create: an older one is migrated only by ``python -m engine db migrate``
(:func:`engine.store.db.migrate`: a backup copy first, then every step in one transaction).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb

from engine.errors import UserError

SCHEMA_VERSION = 6

# v5: what a served run's generations were asked (engine serve, docs/METHODS.md 1.6): one row per
# generation row of the run; the unit (prompt_id, repeat) is the key the request derived
SERVED = """CREATE TABLE IF NOT EXISTS served (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,           -- the request's prompt id (a hash of what was sent), or a pinned id
        repeat INTEGER,              -- its occurrence index in the run (or the pinned repeat)
        mode VARCHAR,                -- 'coupled' | 'independent' (the server's --noise)
        request_id VARCHAR,          -- the response's id ('cmpl-...' / 'chatcmpl-...'): one per request
        choice_index INTEGER,        -- the choice's index in that response
        endpoint VARCHAR,            -- 'completions' | 'chat'
        pinned BOOLEAN,              -- the client pinned the key (the request's "coupling" field)
        request JSON,                -- the question and its fields: prompt | messages, temperature, top_p,
                                     -- top_k, seed, max_tokens, stop, n, logprobs, echo (never the key)
        prompt_tokens INTEGER,       -- the prompt's length in tokens (after the chat template)
        probs FLOAT[],               -- per generated token: its probability under the sampling distribution
        logprobs FLOAT[],            -- per generated token: the model's log-probability (temperature 1)
        latency_s DOUBLE,            -- from the request's arrival to its last token
        created_at TIMESTAMP DEFAULT current_timestamp,
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode))"""

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
        n_units INTEGER,             -- expected generations = models x prompts x repeats x modes
        heartbeat_at TIMESTAMP,      -- v2: last sign of life of the generating process (stale-run check)
        pid INTEGER,                 -- v2: that process's id ...
        host VARCHAR                 -- v2: ... and host name
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
        -- v3: the judge model as the server reported it (API), or as resolved (local)
        reported_model VARCHAR,
        prompt_tokens INTEGER,       -- v3: token usage of the request, as reported (NULL: unknown)
        completion_tokens INTEGER,   -- v3
        -- v3: seconds from the first attempt to the reply (a batch judge: its batch's)
        latency_s DOUBLE,
        attempts INTEGER,            -- v3: requests sent for this verdict (1 = no retry)
        error VARCHAR,               -- v3: why a request failed for good (its verdict is then unparseable)
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
        -- v4: where a label came from (all optional, NULL = unknown); prompt_id stays the cluster
        repeat INTEGER,              -- v4: the generation's repeat within its prompt (not the cluster)
        mode VARCHAR,                -- v4: the generation mode, 'coupled' | 'independent'
        labeller VARCHAR,            -- v4: who gave the label (a person's id, or the judge's name)
        labelled_at TIMESTAMP,       -- v4: when the label was given (UTC)
        presented VARCHAR,           -- v4: 'ab' (model_a shown first) | 'ba'
        category VARCHAR,            -- v6: the prompt's category (a slice of winrates --by category)
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
    SERVED,  # v5
)


_UNIT = (
    r"^(.*):([0-9]+)$"  # '<prompt_id>:<repeat>', the unit id `comparisons from-judge` stored before v4
)

# (from_version, statements): the SQL taking a database of ``from_version`` to ``from_version + 1``.
# Append a step when SCHEMA_VERSION is bumped; steps run in order, all in one transaction.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            "ALTER TABLE runs ADD COLUMN heartbeat_at TIMESTAMP",
            "ALTER TABLE runs ADD COLUMN pid INTEGER",
            "ALTER TABLE runs ADD COLUMN host VARCHAR",
        ),
    ),
    (
        2,
        tuple(
            f"ALTER TABLE judgments ADD COLUMN {col}"
            for col in (
                "reported_model VARCHAR",
                "prompt_tokens INTEGER",
                "completion_tokens INTEGER",
                "latency_s DOUBLE",
                "attempts INTEGER",
                "error VARCHAR",
            )
        ),
    ),
    (
        3,
        (
            # comparisons: the provenance of a label (repeat, mode, labeller, labelled_at, presented);
            # see SCHEMA
            *(
                f"ALTER TABLE comparisons ADD COLUMN {col}"
                for col in (
                    "repeat INTEGER",
                    "mode VARCHAR",
                    "labeller VARCHAR",
                    "labelled_at TIMESTAMP",
                    "presented VARCHAR",
                )
            ),
            # sets made by `comparisons from-judge` before v4 stored '<prompt_id>:<repeat>' as the prompt
            # id: the prompt is the cluster (docs/METHODS.md 7.2), so split the repeat off into its own
            # column
            f"UPDATE comparisons SET repeat = CAST(regexp_extract(prompt_id, '{_UNIT}', 2) AS INTEGER), "
            f"prompt_id = regexp_extract(prompt_id, '{_UNIT}', 1) WHERE regexp_matches(prompt_id, "
            f"'{_UNIT}') AND set_name IN (SELECT name FROM comparison_sets WHERE "
            "json_extract_string(meta, '$.format') = 'judgments')",
            "UPDATE comparisons SET mode = json_extract_string(s.meta, '$.mode'), labeller = "
            "json_extract_string(s.meta, '$.judge') FROM comparison_sets s WHERE s.name = "
            "comparisons.set_name AND json_extract_string(s.meta, '$.format') = 'judgments'",
        ),
    ),
    (4, (SERVED,)),  # the served runs' requests (engine serve)
    # comparisons: the prompt's category (optional, NULL = none), the slices of `winrates --by category`
    (5, ("ALTER TABLE comparisons ADD COLUMN category VARCHAR",)),
)
assert [v for v, _ in MIGRATIONS] == list(range(1, SCHEMA_VERSION)), (
    "one migration step per older version"
)


@dataclass(frozen=True)
class SchemaState:
    """What a DuckDB file holds: ``kind`` is 'empty' (no tables), 'current', 'older', 'newer' or
    'foreign' (tables that are not ours, or no schema version); ``version`` when known."""

    kind: str
    version: int | None
    tables: tuple[str, ...]


def schema_state(con: duckdb.DuckDBPyConnection) -> SchemaState:
    """Read (never write) what the connected database holds."""
    tables = tuple(
        sorted(
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_catalog = current_database() AND table_schema = 'main'"
            ).fetchall()
        )
    )
    if not tables:
        return SchemaState("empty", None, tables)
    version = None
    if "meta" in tables:
        try:
            row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row is not None else None
        except (
            duckdb.CatalogException,
            duckdb.BinderException,
            ValueError,
            TypeError,
        ):  # a meta that is not ours
            version = None  # (an I/O error - a damaged file - propagates)
    if version is None or version < 1:
        return SchemaState("foreign", None, tables)
    kind = "current" if version == SCHEMA_VERSION else "older" if version < SCHEMA_VERSION else "newer"
    return SchemaState(kind, version, tables)


def schema_problem(state: SchemaState, path: str | os.PathLike) -> str | None:
    """The one-line reason this code must not use the database, or None when it may."""
    if state.kind == "older":
        return (
            f"database {path} has schema version {state.version} (this code uses {SCHEMA_VERSION}); "
            f"nothing was written: run `python -m engine db migrate --db {path}` (it makes a backup "
            "copy first)"
        )
    if state.kind == "newer":
        return (
            f"database {path} has schema version {state.version}, newer than this code's "
            f"{SCHEMA_VERSION}; nothing was written: update Coupled Eval or pass another --db"
        )
    if state.kind == "foreign":
        shown = ", ".join(state.tables[:6]) + (", ..." if len(state.tables) > 6 else "")
        return (
            f"{path} is a DuckDB database but not a Coupled Eval one (tables: {shown}; no schema "
            "version); nothing was written: pass another --db"
        )
    return None


@contextlib.contextmanager
def atomic(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT on ``con``: every statement of the block is stored, or none.

    Any exception, KeyboardInterrupt included, rolls back, and the original error is what
    propagates: when DuckDB has already aborted the transaction (a failed COMMIT), the rollback's
    own "no transaction is active" is ignored rather than raised over it.
    """
    con.begin()
    try:
        yield con
        con.commit()
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.rollback()
        raise


def init_schema(con: duckdb.DuckDBPyConnection, path: str | os.PathLike = "the database") -> None:
    """Look first: create every table in an empty database, do nothing to one of this version, and
    raise UserError (one line, nothing written) for an older, newer or unrelated one."""
    state = schema_state(con)
    if state.kind == "current":
        return
    problem = schema_problem(state, path)
    if problem:
        raise UserError(problem)
    with atomic(con):
        for ddl in SCHEMA:
            con.execute(ddl)
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])


TABLES: tuple[str, ...] = tuple(ddl.split("EXISTS", 1)[1].split("(", 1)[0].strip() for ddl in SCHEMA)
