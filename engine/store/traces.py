"""Token traces: one unit's trace rows by page of steps, trace lengths, token texts by id, and the
first divergence of several models per unit (aggregated in SQL)."""

from __future__ import annotations

import os

import pandas as pd

from engine.store.db import query_df, reader, scalar


def trace_rows(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str, models: list[str],
               step_offset: int, max_steps: int) -> pd.DataFrame:
    """Trace rows of one unit for ``models``, steps [step_offset, step_offset + max_steps): model, step,
    token_id, token_text (as stored: the tokenizer's piece), prob, top_ids, top_probs, top_gumbels, seed."""
    return query_df(db, """
        SELECT t.model, t.step, t.token_id, t.token_text, t.prob, t.top_ids, t.top_probs, t.top_gumbels,
               CAST(g.seed AS VARCHAR) AS seed
        FROM token_traces t
        LEFT JOIN generations g ON g.run_id = t.run_id AND g.model = t.model AND g.prompt_id = t.prompt_id
             AND g.repeat = t.repeat AND g.mode = t.mode
        WHERE t.run_id = ? AND t.prompt_id = ? AND t.repeat = ? AND t.mode = ? AND list_contains(?, t.model)
              AND t.step >= ? AND t.step < ?
        ORDER BY t.step, t.model""",
                    [run_id, prompt_id, int(repeat), mode, list(models), int(step_offset),
                     int(step_offset) + int(max_steps)])


def trace_length(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str) -> int:
    """The longest trace (steps) of one unit over its models."""
    with reader(db) as con:
        n = scalar(con, """SELECT coalesce(max(step) + 1, 0) FROM token_traces
                           WHERE run_id = ? AND prompt_id = ? AND repeat = ? AND mode = ?""",
                   [run_id, prompt_id, int(repeat), mode])
    return int(n)


def run_key_mode(db: str | os.PathLike, run_id: str) -> str | None:
    """How the run keys its noise ('token_id' or 'bytes'); None for an unknown run."""
    df = query_df(db, "SELECT key_mode FROM runs WHERE run_id = ?", [run_id])
    return None if df.empty else df.iloc[0, 0]


def run_config_text(db: str | os.PathLike, run_id: str) -> str | None:
    """The run's stored config (JSON text), None when the run or its config is missing."""
    df = query_df(db, "SELECT CAST(config AS VARCHAR) AS config FROM runs WHERE run_id = ?", [run_id])
    return None if df.empty or df.iloc[0, 0] is None else str(df.iloc[0, 0])


def token_pieces(db: str | os.PathLike, run_id: str, ids: list[int], limit: int) -> pd.DataFrame:
    """token_id, token_text (stored piece) of the ``ids`` some model of the run generated."""
    return query_df(db, """SELECT token_id, any_value(token_text) AS token_text FROM token_traces
                           WHERE run_id = ? AND list_contains(?, token_id) GROUP BY token_id LIMIT ?""",
                    [run_id, sorted(ids)[:limit], int(limit)])


def first_divergences(db: str | os.PathLike, run_id: str, models: list[str], mode: str) -> pd.DataFrame:
    """Per unit (prompt_id, repeat): the first step where the models' tokens differ (or one of them
    has stopped), NULL when they never differ, and the longest trace length (n_steps)."""
    return query_df(db, """
        WITH t AS (SELECT prompt_id, repeat, step, count(DISTINCT token_id) AS n_tokens, count(*) AS n_models
                   FROM token_traces WHERE run_id = ? AND mode = ? AND list_contains(?, model)
                   GROUP BY prompt_id, repeat, step)
        SELECT prompt_id, repeat,
               min(step) FILTER (WHERE n_tokens > 1 OR n_models < ?) AS first_divergence,
               max(step) + 1 AS n_steps
        FROM t GROUP BY prompt_id, repeat ORDER BY prompt_id, repeat""",
                    [run_id, mode, list(models), len(models)])
