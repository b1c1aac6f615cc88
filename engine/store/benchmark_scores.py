"""Typed reads of the ``scores`` table for the benchmark comparison (engine.analysis.benchmark).

(The scores table family; kept in its own module this round so that parallel additions to a
``scores.py`` do not collide: the lead may fold it in.)
"""

from __future__ import annotations

import os

import pandas as pd

from engine.errors import UserError
from engine.store.db import query_df, reader


def runs_with_scores(db: str | os.PathLike) -> pd.DataFrame:
    """Which (run, model, mode, rule) have scores, with counts and the run's dataset."""
    return query_df(db, """
        SELECT s.run_id, r.dataset_id, s.model, s.mode, s.rule, count(*) AS n
        FROM scores s LEFT JOIN runs r USING (run_id)
        GROUP BY ALL ORDER BY s.run_id, s.model, s.mode, s.rule""")


def _resolve_run(con, models: list[str], rule: str, run: str | None) -> str:
    """The run to analyse: ``run`` if given (checked), else the most recent run scoring all models."""
    rows = con.execute(
        """SELECT s.run_id, max(r.created_at) AS t, count(DISTINCT s.model) AS m
           FROM scores s LEFT JOIN runs r USING (run_id)
           WHERE s.rule = ? AND list_contains(?, s.model)
           GROUP BY s.run_id ORDER BY t DESC NULLS LAST, s.run_id""",
        [rule, models]).fetchall()
    complete = [r[0] for r in rows if r[2] == len(set(models))]
    if run is not None:
        if run not in complete:
            raise UserError(f"run {run!r} has no '{rule}' scores for all of {models}; runs that do: {complete}")
        return run
    if not complete:
        known = [r[0] for r in con.execute("SELECT DISTINCT model FROM scores ORDER BY 1").fetchall()]
        raise UserError(f"no run has '{rule}' scores for all of {models}; scored models: {known}")
    return complete[0]


def pair_scores(db: str | os.PathLike, models: list[str], subject: str | None, run: str | None,
                rule: str) -> tuple[str, pd.DataFrame]:
    """The scores of ``models`` in one run (``run``, else the newest run scoring all of them under ``rule``).

    Returns:
        (run_id, DataFrame of mode, model, prompt_id, repeat, score, idx (dataset order), subject).
    Raises:
        UserError: no such run, or an unknown ``subject`` (names the run's subjects).
    """
    with reader(db) as con:
        run_id = _resolve_run(con, models, rule, run)
        sql = """SELECT s.mode, s.model, s.prompt_id, s.repeat, s.score,
                        coalesce(p.idx, 0) AS idx, p.subject
                 FROM scores s
                 LEFT JOIN runs r ON r.run_id = s.run_id
                 LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = s.prompt_id
                 WHERE s.run_id = ? AND s.rule = ? AND list_contains(?, s.model)"""
        params: list = [run_id, rule, models]
        if subject is not None:
            sql += " AND p.subject = ?"
            params.append(subject)
        df = con.execute(sql, params).df()
        if df.empty and subject is not None:
            subjects = [r[0] for r in con.execute(
                """SELECT DISTINCT p.subject FROM prompts p JOIN runs r ON r.dataset_id = p.dataset_id
                   WHERE r.run_id = ? AND p.subject IS NOT NULL ORDER BY 1""", [run_id]).fetchall()]
            raise UserError(f"unknown subject {subject!r} for run {run_id!r}; allowed: {subjects}")
    return run_id, df


def scored_run_choices(db: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per scored run its models, rules and modes (lists), and per run the subjects with prompt counts."""
    runs = query_df(db, """
        SELECT s.run_id, list(DISTINCT s.model ORDER BY s.model) AS models,
               list(DISTINCT s.rule ORDER BY s.rule) AS rules, list(DISTINCT s.mode ORDER BY s.mode) AS modes
        FROM scores s GROUP BY s.run_id ORDER BY s.run_id""")
    subjects = query_df(db, """
        SELECT r.run_id, p.subject, count(*) AS n FROM runs r JOIN prompts p ON p.dataset_id = r.dataset_id
        WHERE r.run_id IN (SELECT DISTINCT run_id FROM scores) AND p.subject IS NOT NULL
        GROUP BY ALL ORDER BY r.run_id, p.subject""")
    return runs, subjects
