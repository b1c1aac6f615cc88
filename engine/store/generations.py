"""Generations and token traces: the rows a run's driver writes, and what it reads back to resume.

A run's driver is the only writer (engine.generation.run): one transaction per chunk, so a
chunk's generations and traces are stored together or not at all. INSERT OR IGNORE: a chunk
written twice (a retried Ray shard) changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import duckdb
import pandas as pd

from engine.store.db import insert_df, query_df, scalar, transaction


class GenerationRow(NamedTuple):
    """One row of ``generations``."""

    run_id: str
    model: str
    prompt_id: str
    repeat: int
    mode: str
    seed: int
    text: str
    token_ids: list[int]
    finish_reason: str
    n_tokens: int


class TraceRow(NamedTuple):
    """One row of ``token_traces``: one generated token of one unit (top-k lists None when off)."""

    run_id: str
    model: str
    prompt_id: str
    repeat: int
    mode: str
    step: int
    token_id: int
    token_text: str
    prob: float
    top_ids: list[int] | None
    top_probs: list[float] | None
    top_gumbels: list[float] | None


class ModelModeCount(NamedTuple):
    """Per model and mode of a run: units stored, their tokens, the share cut at max_new_tokens."""

    model: str
    mode: str
    units: int
    tokens: int
    cut_at_max: float


def write_chunk(db: str | os.PathLike, generations: Sequence[GenerationRow], traces: Sequence[TraceRow]) -> None:
    """One transaction: these generations and token traces (all or nothing; rows already stored stay)."""
    gens = pd.DataFrame(list(generations), columns=list(GenerationRow._fields))
    tr = pd.DataFrame(list(traces), columns=list(TraceRow._fields))
    with transaction(db) as con:
        if len(gens):
            insert_df(con, "generations", gens, list(gens.columns), casts={"token_ids": "INTEGER[]"},
                      conflict="OR IGNORE")
        if len(tr):
            insert_df(con, "token_traces", tr, list(tr.columns),
                      casts={"top_ids": "INTEGER[]", "top_probs": "FLOAT[]", "top_gumbels": "FLOAT[]"},
                      conflict="OR IGNORE")


def stored_units(con: duckdb.DuckDBPyConnection, run_id: str) -> set[tuple[str, str, str, int]]:
    """The run's stored units as (model, mode, prompt_id, repeat)."""
    rows = con.execute("SELECT model, mode, prompt_id, repeat FROM generations WHERE run_id = ?", [run_id]).fetchall()
    return {(m, md, p, int(r)) for m, md, p, r in rows}


def count_generations(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """How many generations of the run are stored."""
    return int(scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [run_id]))


def per_model_counts(db: str | os.PathLike, run_id: str) -> list[ModelModeCount]:
    """Per model and mode of the run (sorted by model, mode): units, tokens, share cut at the limit."""
    df = query_df(db, "SELECT model, mode, count(*) AS units, sum(n_tokens) AS tokens, "
                      "avg(CASE WHEN finish_reason = 'length' THEN 1.0 ELSE 0.0 END) AS cut_at_max "
                      "FROM generations WHERE run_id = ? GROUP BY model, mode ORDER BY model, mode", [run_id])
    return [ModelModeCount(str(r.model), str(r.mode), int(r.units), int(r.tokens), float(r.cut_at_max))
            for r in df.itertuples()]


__all__ = ["GenerationRow", "TraceRow", "ModelModeCount", "write_chunk", "stored_units", "count_generations",
           "per_model_counts"]
