"""Generations and token traces: the rows a run's driver writes and reads back to resume, and the
reads that browse them (runs, models and datasets with their generation counts, a run's prompts and
units, a page of generations, one unit's trace rows by page of steps, token pieces, first divergences).

A run's driver is the only writer (engine.generation.run): one transaction per chunk, so a
chunk's generations and traces are stored together or not at all. INSERT OR IGNORE: a chunk
written twice (a retried Ray shard) changes nothing. The reads open the database for one short batch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import duckdb
import pandas as pd

from engine.store.db import insert_df, query_df, reader, scalar, transaction


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


def write_chunk(
    db: str | os.PathLike, generations: Sequence[GenerationRow], traces: Sequence[TraceRow]
) -> None:
    """One transaction: these generations and token traces (all or nothing; rows already stored stay)."""
    gens = pd.DataFrame(list(generations), columns=list(GenerationRow._fields))
    tr = pd.DataFrame(list(traces), columns=list(TraceRow._fields))
    with transaction(db) as con:
        if len(gens):
            insert_df(
                con,
                "generations",
                gens,
                list(gens.columns),
                casts={"token_ids": "INTEGER[]"},
                conflict="OR IGNORE",
            )
        if len(tr):
            insert_df(
                con,
                "token_traces",
                tr,
                list(tr.columns),
                casts={"top_ids": "INTEGER[]", "top_probs": "FLOAT[]", "top_gumbels": "FLOAT[]"},
                conflict="OR IGNORE",
            )


def stored_units(con: duckdb.DuckDBPyConnection, run_id: str) -> set[tuple[str, str, str, int]]:
    """The run's stored units as (model, mode, prompt_id, repeat)."""
    rows = con.execute(
        "SELECT model, mode, prompt_id, repeat FROM generations WHERE run_id = ?", [run_id]
    ).fetchall()
    return {(m, md, p, int(r)) for m, md, p, r in rows}


def count_generations(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """How many generations of the run are stored."""
    return int(scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [run_id]))


def per_model_counts(db: str | os.PathLike, run_id: str) -> list[ModelModeCount]:
    """Per model and mode of the run (sorted by model, mode): units, tokens, share cut at the limit."""
    df = query_df(
        db,
        "SELECT model, mode, count(*) AS units, sum(n_tokens) AS tokens, "
        "avg(CASE WHEN finish_reason = 'length' THEN 1.0 ELSE 0.0 END) AS cut_at_max "
        "FROM generations WHERE run_id = ? GROUP BY model, mode ORDER BY model, mode",
        [run_id],
    )
    return [
        ModelModeCount(str(r.model), str(r.mode), int(r.units), int(r.tokens), float(r.cut_at_max))
        for r in df.itertuples()
    ]


__all__ = [
    "GenerationRow",
    "TraceRow",
    "ModelModeCount",
    "write_chunk",
    "stored_units",
    "count_generations",
    "per_model_counts",
]


# Browsing (reads only)


def runs_with_counts(db: str | os.PathLike) -> pd.DataFrame:
    """Every run, newest first: run_id, created_at, dataset_id, status, n_units, key_mode, config
    (JSON text), warnings (JSON text), n_generations, models and modes that have generations."""
    return query_df(
        db,
        """
        SELECT r.run_id, r.created_at, r.dataset_id, r.status, r.n_units, r.key_mode,
               CAST(r.config AS VARCHAR) AS config, CAST(r.warnings AS VARCHAR) AS warnings,
               coalesce(g.n, 0) AS n_generations, g.models, g.modes
        FROM runs r LEFT JOIN (
            SELECT run_id, count(*) AS n, list(DISTINCT model ORDER BY model) AS models,
                   list(DISTINCT mode ORDER BY mode) AS modes
            FROM generations GROUP BY run_id) g USING (run_id)
        ORDER BY r.created_at DESC, r.run_id""",
    )


def models_with_counts(db: str | os.PathLike) -> pd.DataFrame:
    """Stored models (name, variant, vocab_id, vocab_size, source) with their generation counts."""
    return query_df(
        db,
        """
        SELECT m.name, m.variant, m.vocab_id, m.vocab_size, m.source, coalesce(g.n, 0) AS n_generations
        FROM models m LEFT JOIN (SELECT model, count(*) AS n FROM generations GROUP BY model) g
             ON g.model = m.name
        ORDER BY m.name""",
    )


def datasets_with_counts(db: str | os.PathLike) -> pd.DataFrame:
    """Stored datasets (dataset_id, kind, n_prompts, n_subjects, source)."""
    return query_df(
        db,
        """
        SELECT d.dataset_id, d.kind, d.n_prompts, coalesce(p.n_subjects, 0) AS n_subjects, d.source
        FROM datasets d LEFT JOIN (SELECT dataset_id, count(DISTINCT subject) AS n_subjects
                                   FROM prompts GROUP BY dataset_id) p USING (dataset_id)
        ORDER BY d.dataset_id""",
    )


def run_contents(
    db: str | os.PathLike, run_id: str
) -> tuple[list[str], list[str], list[int], int] | None:
    """(models, modes, repeats, number of prompts) with generations in ``run_id``; None for a run
    neither stored nor with generations."""
    with reader(db) as con:
        if (
            scalar(con, "SELECT count(*) FROM runs WHERE run_id = ?", [run_id]) == 0
            and scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [run_id]) == 0
        ):
            return None
        models = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT model FROM generations WHERE run_id = ? ORDER BY model", [run_id]
            ).fetchall()
        ]
        modes = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT mode FROM generations WHERE run_id = ? ORDER BY mode", [run_id]
            ).fetchall()
        ]
        repeats = [
            int(r[0])
            for r in con.execute(
                "SELECT DISTINCT repeat FROM generations WHERE run_id = ? ORDER BY repeat", [run_id]
            ).fetchall()
        ]
        n_prompts = scalar(
            con, "SELECT count(DISTINCT prompt_id) FROM generations WHERE run_id = ?", [run_id]
        )
    return models, modes, repeats, int(n_prompts)


def run_prompts(
    db: str | os.PathLike, run_id: str, search: str | None, limit: int, offset: int
) -> pd.DataFrame:
    """Prompts with generations in ``run_id`` in dataset order (prompt_id, idx, subject, question, gold),
    optionally those whose id or question contains ``search`` (lower case, a parameter), paged."""
    sql = """
        SELECT g.prompt_id, p.idx, p.subject, p.question, p.gold
        FROM (SELECT DISTINCT prompt_id FROM generations WHERE run_id = ?) g
        LEFT JOIN runs r ON r.run_id = ?
        LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = g.prompt_id"""
    params: list = [run_id, run_id]
    if search:
        sql += " WHERE contains(lower(g.prompt_id), ?) OR contains(lower(coalesce(p.question, '')), ?)"
        params += [search.lower(), search.lower()]
    sql += " ORDER BY p.idx NULLS LAST, g.prompt_id LIMIT ? OFFSET ?"
    return query_df(db, sql, params + [int(limit), int(offset)])


def prompt_row(db: str | os.PathLike, run_id: str, prompt_id: str) -> pd.DataFrame:
    """The prompt of a run's dataset: prompt_id, subject, question, choices (JSON text), gold,
    user_prompt."""
    return query_df(
        db,
        """
        SELECT p.prompt_id, p.subject, p.question, CAST(p.choices AS VARCHAR) AS choices, p.gold,
               p.user_prompt
        FROM runs r JOIN prompts p ON p.dataset_id = r.dataset_id
        WHERE r.run_id = ? AND p.prompt_id = ?""",
        [run_id, prompt_id],
    )


def unit_rows(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int) -> pd.DataFrame:
    """Every generation of one unit (all models, both modes) with one score per generation (the
    'paper' rule if scored, else the first other rule): model, mode, text, n_tokens, finish_reason,
    seed, rule, extracted, score."""
    return query_df(
        db,
        """
        SELECT g.model, g.mode, g.text, g.n_tokens, g.finish_reason, CAST(g.seed AS VARCHAR) AS seed,
               s.rule, s.extracted, s.score
        FROM generations g
        LEFT JOIN (SELECT *, row_number() OVER (PARTITION BY run_id, model, prompt_id, repeat, mode
                                                 ORDER BY rule <> 'paper', rule) AS rk
                   FROM scores WHERE run_id = ? AND prompt_id = ? AND repeat = ?) s
             ON s.model = g.model AND s.mode = g.mode AND s.rk = 1
        WHERE g.run_id = ? AND g.prompt_id = ? AND g.repeat = ?
        ORDER BY g.mode, g.model""",
        [run_id, prompt_id, int(repeat), run_id, prompt_id, int(repeat)],
    )


def generation_rows(db: str | os.PathLike, run_id: str, limit: int, offset: int) -> pd.DataFrame:
    """One page of a run's generations: model, prompt_id, repeat, mode, n_tokens, finish_reason, text."""
    return query_df(
        db,
        """
        SELECT model, prompt_id, repeat, mode, n_tokens, finish_reason, text FROM generations
        WHERE run_id = ? ORDER BY prompt_id, repeat, mode, model LIMIT ? OFFSET ?""",
        [run_id, int(limit), int(offset)],
    )


# Token traces (reads only)


def trace_rows(
    db: str | os.PathLike,
    run_id: str,
    prompt_id: str,
    repeat: int,
    mode: str,
    models: list[str],
    step_offset: int,
    max_steps: int,
) -> pd.DataFrame:
    """Trace rows of one unit for ``models``, steps [step_offset, step_offset + max_steps): model, step,
    token_id, token_text (as stored: the tokenizer's piece), prob, top_ids, top_probs, top_gumbels,
    seed."""
    return query_df(
        db,
        """
        SELECT t.model, t.step, t.token_id, t.token_text, t.prob, t.top_ids, t.top_probs, t.top_gumbels,
               CAST(g.seed AS VARCHAR) AS seed
        FROM token_traces t
        LEFT JOIN generations g ON g.run_id = t.run_id AND g.model = t.model AND g.prompt_id = t.prompt_id
             AND g.repeat = t.repeat AND g.mode = t.mode
        WHERE t.run_id = ? AND t.prompt_id = ? AND t.repeat = ? AND t.mode = ? AND list_contains(?, t.model)
              AND t.step >= ? AND t.step < ?
        ORDER BY t.step, t.model""",
        [
            run_id,
            prompt_id,
            int(repeat),
            mode,
            list(models),
            int(step_offset),
            int(step_offset) + int(max_steps),
        ],
    )


def trace_length(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str) -> int:
    """The longest trace (steps) of one unit over its models."""
    with reader(db) as con:
        n = scalar(
            con,
            """SELECT coalesce(max(step) + 1, 0) FROM token_traces
                           WHERE run_id = ? AND prompt_id = ? AND repeat = ? AND mode = ?""",
            [run_id, prompt_id, int(repeat), mode],
        )
    return int(n)


def token_pieces(db: str | os.PathLike, run_id: str, ids: list[int], limit: int) -> pd.DataFrame:
    """token_id, token_text (stored piece) of the ``ids`` some model of the run generated."""
    return query_df(
        db,
        """SELECT token_id, any_value(token_text) AS token_text FROM token_traces
                           WHERE run_id = ? AND list_contains(?, token_id) GROUP BY token_id LIMIT ?""",
        [run_id, sorted(ids)[:limit], int(limit)],
    )


def first_divergences(db: str | os.PathLike, run_id: str, models: list[str], mode: str) -> pd.DataFrame:
    """Per unit (prompt_id, repeat): the first step where the models' tokens differ (or one of them
    has stopped), NULL when they never differ, and the longest trace length (n_steps)."""
    return query_df(
        db,
        """
        WITH t AS (SELECT prompt_id, repeat, step, count(DISTINCT token_id) AS n_tokens, count(*) AS n_models
                   FROM token_traces WHERE run_id = ? AND mode = ? AND list_contains(?, model)
                   GROUP BY prompt_id, repeat, step)
        SELECT prompt_id, repeat,
               min(step) FILTER (WHERE n_tokens > 1 OR n_models < ?) AS first_divergence,
               max(step) + 1 AS n_steps
        FROM t GROUP BY prompt_id, repeat ORDER BY prompt_id, repeat""",
        [run_id, mode, list(models), len(models)],
    )
