"""Runs: the unknown-run check, stored settings, warnings and status, the generations export, and
what a run's driver records (the run, its dataset and prompts, the models it loaded)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import duckdb
import pandas as pd

from engine.errors import UserError
from engine.store.db import insert_df, query_df, reader, scalar, writer
from engine.store.generations import count_generations

RUN_STATUSES = ("running", "done", "failed", "cancelled")


def known_runs(con: duckdb.DuckDBPyConnection, limit: int = 20) -> list[str]:
    """Run ids stored in ``runs`` or with generations (imports may have only the latter), sorted."""
    return [
        r[0]
        for r in con.execute(
            "SELECT run_id FROM (SELECT run_id FROM runs UNION SELECT DISTINCT run_id FROM generations) "
            "ORDER BY run_id LIMIT ?",
            [int(limit)],
        ).fetchall()
    ]


def unknown_run(con: duckdb.DuckDBPyConnection, run_id: str) -> UserError:
    """The one 'unknown run' error: names the run and the stored ones."""
    return UserError(f"unknown run {run_id!r}; known runs: {', '.join(known_runs(con)) or '(none)'}")


def require_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """UserError (:func:`unknown_run`) unless ``run_id`` is in ``runs`` or has generations."""
    if (
        scalar(con, "SELECT count(*) FROM runs WHERE run_id = ?", [run_id]) == 0
        and scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [run_id]) == 0
    ):
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


def update_status(con: duckdb.DuckDBPyConnection, run_id: str, status: str) -> None:
    """Set a run's status on an open writer connection."""
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; allowed: {', '.join(RUN_STATUSES)}")
    con.execute("UPDATE runs SET status = ? WHERE run_id = ?", [status, run_id])


def set_status(db: str | os.PathLike, run_id: str, status: str) -> None:
    with writer(db) as con:
        update_status(con, run_id, status)


# ---- what a run's driver records (engine.generation.run)


class DatasetRecord(NamedTuple):
    """A row of ``datasets``."""

    dataset_id: str
    source: str
    kind: str
    n_prompts: int


class PromptRow(NamedTuple):
    """A row of ``prompts`` (``choices``: a JSON list or None)."""

    dataset_id: str
    prompt_id: str
    idx: int
    subject: str | None
    question: str | None
    choices: str | None
    gold: str | None
    user_prompt: str


class RunRecord(NamedTuple):
    """A stored run's status, expected units and config."""

    run_id: str
    status: str
    n_units: int
    config: dict[str, Any]


def stored_config(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """The run's stored config, None when the run is not stored."""
    row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return None if row is None else json.loads(row[0])


def create_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    dataset_id: str,
    config: dict[str, Any],
    code_version: str,
    key_mode: str,
    warnings: Sequence[str],
    n_units: int,
    host: str | None = None,
) -> None:
    """A new run, status 'running'; ``host``: the machine of its driver (the design's "machine" row)."""
    con.execute(
        """INSERT INTO runs (run_id, dataset_id, config, code_version, key_mode, warnings, status, n_units,
                                     host)
                   VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?)""",
        [
            run_id,
            dataset_id,
            json.dumps(config),
            code_version,
            key_mode,
            json.dumps(list(warnings)),
            n_units,
            host,
        ],
    )


def record_host(con: duckdb.DuckDBPyConnection, run_id: str, host: str) -> None:
    """Fill a run's driver host where none is recorded (runs created before hosts were recorded)."""
    con.execute("UPDATE runs SET host = ? WHERE run_id = ? AND host IS NULL", [host, run_id])


def save_dataset(
    con: duckdb.DuckDBPyConnection, dataset: DatasetRecord, prompts: Sequence[PromptRow]
) -> None:
    """The dataset and its prompts (rows already stored stay); ``n_prompts`` = the prompts stored
    for it (a --limit run stores a subset of the dataset's prompts)."""
    con.execute(
        "INSERT OR IGNORE INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, ?, ?)",
        list(dataset),
    )
    cols = list(PromptRow._fields)
    df = pd.DataFrame(list(prompts), columns=cols).astype(
        {"subject": "object", "question": "object", "choices": "object", "gold": "object"}
    )
    insert_df(
        con,
        "prompts",
        df,
        cols,
        conflict="OR IGNORE",
        casts={"subject": "VARCHAR", "question": "VARCHAR", "choices": "JSON", "gold": "VARCHAR"},
    )
    con.execute(
        "UPDATE datasets SET n_prompts = (SELECT count(*) FROM prompts WHERE dataset_id = ?) "
        "WHERE dataset_id = ?",
        [dataset.dataset_id, dataset.dataset_id],
    )


def save_model(
    db: str | os.PathLike,
    record: dict[str, Any],
    run_id: str | None = None,
    model: str | None = None,
    backend: dict[str, Any] | None = None,
) -> None:
    """A loaded model's ``models`` row (replacing an older one); with ``run_id``, ``model`` (the run's
    name for it) and ``backend``, also the run config's ``backends[model]`` (backend, its version,
    dtype and device). One transaction."""
    with writer(db) as con:
        con.execute(
            "INSERT OR REPLACE INTO models (name, source, variant, vocab_id, vocab_size, config) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                record["name"],
                record["source"],
                record["variant"],
                record["vocab_id"],
                record["vocab_size"],
                record["config"],
            ],
        )
        if run_id is not None and model is not None and backend is not None:
            cfg = stored_config(con, run_id) or {}
            cfg.setdefault("backends", {})[model] = backend
            con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(cfg), run_id])


def set_n_units(con, run_id: str, n_units: int) -> None:
    """Set a run's planned unit count inside the caller's transaction."""
    con.execute("UPDATE runs SET n_units = ? WHERE run_id = ?", [int(n_units), run_id])


def finish_run(db: str | os.PathLike, run_id: str, status: str, n_units: int) -> str:
    """Store the run's end status from what is stored: every unit stored -> 'done', else ``status``
    (a signal after the last chunk must not leave a complete run 'cancelled'). Returns it."""
    with writer(db) as con:
        final = "done" if count_generations(con, run_id) >= n_units else status
        update_status(con, run_id, final)
    return final


def set_planned_units(
    db: str | os.PathLike, run_id: str, n_units: int, status: str | None = None
) -> None:
    """Set a run's planned unit count (and optionally its status): a sequential ``--until`` run plans
    round by round, so its ``n_units`` is the units of the rounds it has taken (docs/SEQUENTIAL.md)."""
    with writer(db) as con:
        set_n_units(con, run_id, n_units)
        if status is not None:
            update_status(con, run_id, status)


def run_record(db: str | os.PathLike, run_id: str) -> RunRecord:
    """The stored run (UserError listing known runs when absent)."""
    with reader(db) as con:
        row = con.execute(
            "SELECT status, n_units, CAST(config AS VARCHAR) FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
        if row is None:
            raise unknown_run(con, run_id)
    return RunRecord(run_id, str(row[0]), int(row[1]), json.loads(row[2] or "{}"))


def generations_for_export(db: str | os.PathLike, run_id: str | None = None) -> pd.DataFrame:
    """Generations joined with their prompt (columns: run_id, model, prompt_id, repeat, mode, seed, text,
    finish_reason, n_tokens, token_ids, subject, gold), ordered by run, model, mode, prompt, repeat."""
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


def some_runs(db: str | os.PathLike, limit: int = 20) -> list[str]:
    """Up to ``limit`` stored run ids (for an 'unknown run' message)."""
    with reader(db) as con:
        return known_runs(con, limit)


def sequential_runs(db: str | os.PathLike) -> list[str]:
    """Runs started with ``generate --until`` (their config has a "sequential" entry), newest first."""
    if not os.path.exists(db):
        return []
    df = query_df(
        db,
        "SELECT run_id FROM runs WHERE json_extract(config, '$.sequential') IS NOT NULL "
        "ORDER BY created_at DESC, run_id",
    )
    return [str(r) for r in df["run_id"]]


def race_runs(db: str | os.PathLike) -> list[str]:
    """Runs started with ``engine race`` (their config has a "race" entry), newest first."""
    if not os.path.exists(db):
        return []
    df = query_df(
        db,
        "SELECT run_id FROM runs WHERE json_extract(config, '$.race') IS NOT NULL "
        "ORDER BY created_at DESC, run_id",
    )
    return [str(r) for r in df["run_id"]]


def set_config_entry(db: str | os.PathLike, run_id: str, key: str, value: Any) -> None:
    """Set one top-level entry of a run's stored config (a resumed race's new budget)."""
    with writer(db) as con:
        row = con.execute(
            "SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
        if row is None:
            raise unknown_run(con, run_id)
        cfg = json.loads(row[0] or "{}")
        cfg[key] = value
        con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(cfg), run_id])


def run_key_mode(db: str | os.PathLike, run_id: str) -> str | None:
    """How the run keys its noise ('token_id' or 'bytes'); None for an unknown run."""
    df = query_df(db, "SELECT key_mode FROM runs WHERE run_id = ?", [run_id])
    return None if df.empty else df.iloc[0, 0]


def run_config_text(db: str | os.PathLike, run_id: str) -> str | None:
    """The run's stored config (JSON text), None when the run or its config is missing."""
    df = query_df(db, "SELECT CAST(config AS VARCHAR) AS config FROM runs WHERE run_id = ?", [run_id])
    return None if df.empty or df.iloc[0, 0] is None else str(df.iloc[0, 0])
