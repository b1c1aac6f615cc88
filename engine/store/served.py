"""Served runs (``engine serve``, docs/METHODS.md 1.6): the run a server writes, its requests' rows,
and the stored units its occurrence counters start from.

A served run is an ordinary run (``runs``, ``datasets`` 'served:RUN', ``prompts``, ``generations``,
``token_traces``) plus one ``served`` row per generation: what the request asked (the question and
its fields, never the key), its response id and choice index, the per-token probabilities and
log-probabilities. The server is the run's only writer; each batch of finished completions is one
transaction (:func:`write_served`), so a killed server leaves whole completions only, and readers
get in between two batches.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import duckdb
import pandas as pd

from engine.errors import UserError
from engine.store.db import insert_df, query_df, transaction, writer
from engine.store.generations import GenerationRow, TraceRow
from engine.store.runs import (
    DatasetRecord,
    PromptRow,
    create_run,
    record_host,
    stored_config,
    update_status,
)

SERVED_KIND = "served"  # runs.config["served"] holds the serving settings of a served run


class ServedRow(NamedTuple):
    """One row of ``served`` (``request``: JSON text; ``probs`` / ``logprobs``: one per token)."""

    run_id: str
    model: str
    prompt_id: str
    repeat: int
    mode: str
    request_id: str
    choice_index: int
    endpoint: str
    pinned: bool
    request: str
    prompt_tokens: int
    probs: list[float]
    logprobs: list[float]
    latency_s: float


class StoredUnit(NamedTuple):
    """A stored generation of a served run, as its occurrence counter needs it."""

    model: str
    mode: str
    prompt_id: str
    repeat: int
    seed: int


def dataset_id(run_id: str) -> str:
    """The dataset that holds a served run's prompts."""
    return f"served:{run_id}"


def _merge(prev: dict[str, Any], new: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The stored config of a served run continued by a new server; UserError where they disagree."""
    if SERVED_KIND not in prev:
        raise UserError(
            f"run {run_id!r} exists and is not a served run (made by generate or import); pass "
            "another --run"
        )
    if prev.get("seed") != new.get("seed"):
        raise UserError(
            f"served run {run_id!r} was served with --seed {prev.get('seed')}; this server has "
            f"--seed {new.get('seed')}: use the run's seed or another --run"
        )
    out = dict(prev)
    for key in ("models", "modes"):
        out[key] = list(dict.fromkeys([*(prev.get(key) or []), *(new.get(key) or [])]))
    out[SERVED_KIND] = {**prev[SERVED_KIND], **new[SERVED_KIND]}
    return out


def open_served_run(
    db: str | os.PathLike,
    run_id: str,
    config: dict[str, Any],
    key_mode: str,
    code_version: str,
    host: str,
    warnings: Sequence[str] = (),
) -> list[StoredUnit]:
    """Create the served run, or continue a stored one (same seed and key mode; models and modes
    merged); status 'running'. Returns its stored units (the occurrence counters' start). One
    transaction."""
    ds = dataset_id(run_id)
    with transaction(db) as con:
        prev = stored_config(con, run_id)
        if prev is None:
            create_run(con, run_id, ds, config, code_version, key_mode, warnings, 0, host=host)
            con.execute(
                "INSERT OR IGNORE INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, ?, ?)",
                list(DatasetRecord(ds, f"engine serve --run {run_id}", "prompts", 0)),
            )
        else:
            merged = _merge(prev, config, run_id)
            stored_mode = con.execute("SELECT key_mode FROM runs WHERE run_id = ?", [run_id]).fetchall()[
                0
            ][0]
            if stored_mode != key_mode:
                raise UserError(
                    f"served run {run_id!r} keys its noise by {stored_mode}; these models need "
                    f"{key_mode} (their vocabularies differ from the run's): pass another --run"
                )
            con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(merged), run_id])
            update_status(con, run_id, "running")
            record_host(con, run_id, host)
        rows = con.execute(
            "SELECT model, mode, prompt_id, repeat, seed FROM generations WHERE run_id = ?", [run_id]
        ).fetchall()
    return [StoredUnit(m, md, p, int(r), int(s)) for m, md, p, r, s in rows]


def _new_prompts(con: duckdb.DuckDBPyConnection, ds: str, prompts: Sequence[PromptRow]) -> pd.DataFrame:
    """The prompts not stored yet, numbered after the stored ones in arrival order."""
    uniq = list({p.prompt_id: p for p in prompts}.values())
    have = {
        r[0]
        for r in con.execute(
            "SELECT prompt_id FROM prompts WHERE dataset_id = ? AND prompt_id IN "
            "(SELECT unnest(?::VARCHAR[]))",
            [ds, [p.prompt_id for p in uniq]],
        ).fetchall()
    }
    start = int(con.execute("SELECT count(*) FROM prompts WHERE dataset_id = ?", [ds]).fetchall()[0][0])
    rows = [p._replace(dataset_id=ds) for p in uniq if p.prompt_id not in have]
    rows = [p._replace(idx=start + i) for i, p in enumerate(rows)]
    return pd.DataFrame(rows, columns=list(PromptRow._fields)).astype(
        {"subject": "object", "question": "object", "choices": "object", "gold": "object"}
    )


def write_served(
    db: str | os.PathLike,
    run_id: str,
    prompts: Sequence[PromptRow],
    generations: Sequence[GenerationRow],
    served: Sequence[ServedRow],
    traces: Sequence[TraceRow] = (),
) -> None:
    """One transaction: new prompts, generations, their ``served`` rows and token traces (rows already
    stored stay: a pinned key asked twice is stored once), and the run's unit count."""
    ds = dataset_id(run_id)
    with transaction(db) as con:
        new = _new_prompts(con, ds, prompts)
        if len(new):
            insert_df(
                con,
                "prompts",
                new,
                list(new.columns),
                conflict="OR IGNORE",
                casts={
                    "subject": "VARCHAR",
                    "question": "VARCHAR",
                    "choices": "JSON",
                    "gold": "VARCHAR",
                },
            )
            con.execute(
                "UPDATE datasets SET n_prompts = (SELECT count(*) FROM prompts WHERE dataset_id = ?) "
                "WHERE dataset_id = ?",
                [ds, ds],
            )
        gens = pd.DataFrame(list(generations), columns=list(GenerationRow._fields))
        if len(gens):
            insert_df(
                con,
                "generations",
                gens,
                list(gens.columns),
                casts={"token_ids": "INTEGER[]"},
                conflict="OR IGNORE",
            )
        srv = pd.DataFrame(list(served), columns=list(ServedRow._fields))
        if len(srv):
            insert_df(
                con,
                "served",
                srv,
                list(srv.columns),
                casts={"request": "JSON", "probs": "FLOAT[]", "logprobs": "FLOAT[]"},
                conflict="OR IGNORE",
            )
        tr = pd.DataFrame(list(traces), columns=list(TraceRow._fields))
        if len(tr):
            insert_df(
                con,
                "token_traces",
                tr,
                list(tr.columns),
                casts={"top_ids": "INTEGER[]", "top_probs": "FLOAT[]", "top_gumbels": "FLOAT[]"},
                conflict="OR IGNORE",
            )
        con.execute(
            "UPDATE runs SET n_units = (SELECT count(*) FROM generations WHERE run_id = ?) WHERE run_id = ?",
            [run_id, run_id],
        )


def close_served_run(db: str | os.PathLike, run_id: str, status: str) -> None:
    """The served run's status when its server stops ('done': a graceful stop; 'failed')."""
    with writer(db) as con:
        update_status(con, run_id, status)


def served_rows(db: str | os.PathLike, run_id: str) -> pd.DataFrame:
    """A served run's generations with what their requests asked, in arrival order: model, prompt_id,
    repeat, mode, seed, text, token_ids, finish_reason, request_id, choice_index, endpoint, pinned,
    request (JSON text), probs, logprobs."""
    return query_df(
        db,
        """SELECT g.model, g.prompt_id, g.repeat, g.mode, g.seed, g.text, g.token_ids, g.finish_reason,
                  s.request_id, s.choice_index, s.endpoint, s.pinned, CAST(s.request AS VARCHAR) AS request,
                  s.probs, s.logprobs
           FROM generations g JOIN served s USING (run_id, model, prompt_id, repeat, mode)
           WHERE g.run_id = ? ORDER BY s.created_at, s.request_id, s.choice_index, g.model""",
        [run_id],
    )
