"""What is stored, for browsing: every run with its generation counts, models, datasets, what one
run holds, its prompts (searchable, paged), one prompt, one unit's generations, a page of
generations. Reads only; each opens the database for one short batch."""

from __future__ import annotations

import os

import pandas as pd

from engine.store.db import query_df, reader, scalar
from engine.store.runs import known_runs


def runs_with_counts(db: str | os.PathLike) -> pd.DataFrame:
    """Every run, newest first: run_id, created_at, dataset_id, status, n_units, key_mode, config
    (JSON text), warnings (JSON text), n_generations, models and modes that have generations."""
    return query_df(db, """
        SELECT r.run_id, r.created_at, r.dataset_id, r.status, r.n_units, r.key_mode,
               CAST(r.config AS VARCHAR) AS config, CAST(r.warnings AS VARCHAR) AS warnings,
               coalesce(g.n, 0) AS n_generations, g.models, g.modes
        FROM runs r LEFT JOIN (
            SELECT run_id, count(*) AS n, list(DISTINCT model ORDER BY model) AS models,
                   list(DISTINCT mode ORDER BY mode) AS modes
            FROM generations GROUP BY run_id) g USING (run_id)
        ORDER BY r.created_at DESC, r.run_id""")


def models_with_counts(db: str | os.PathLike) -> pd.DataFrame:
    """Stored models (name, variant, vocab_id, vocab_size, source) with their generation counts."""
    return query_df(db, """
        SELECT m.name, m.variant, m.vocab_id, m.vocab_size, m.source, coalesce(g.n, 0) AS n_generations
        FROM models m LEFT JOIN (SELECT model, count(*) AS n FROM generations GROUP BY model) g
             ON g.model = m.name
        ORDER BY m.name""")


def datasets_with_counts(db: str | os.PathLike) -> pd.DataFrame:
    """Stored datasets (dataset_id, kind, n_prompts, n_subjects, source)."""
    return query_df(db, """
        SELECT d.dataset_id, d.kind, d.n_prompts, coalesce(p.n_subjects, 0) AS n_subjects, d.source
        FROM datasets d LEFT JOIN (SELECT dataset_id, count(DISTINCT subject) AS n_subjects
                                   FROM prompts GROUP BY dataset_id) p USING (dataset_id)
        ORDER BY d.dataset_id""")


def run_contents(db: str | os.PathLike, run_id: str) -> tuple[list[str], list[str], list[int], int] | None:
    """(models, modes, repeats, number of prompts) with generations in ``run_id``; None for a run
    neither stored nor with generations."""
    with reader(db) as con:
        if scalar(con, "SELECT count(*) FROM runs WHERE run_id = ?", [run_id]) == 0 and \
                scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [run_id]) == 0:
            return None
        models = [r[0] for r in con.execute(
            "SELECT DISTINCT model FROM generations WHERE run_id = ? ORDER BY model", [run_id]).fetchall()]
        modes = [r[0] for r in con.execute(
            "SELECT DISTINCT mode FROM generations WHERE run_id = ? ORDER BY mode", [run_id]).fetchall()]
        repeats = [int(r[0]) for r in con.execute(
            "SELECT DISTINCT repeat FROM generations WHERE run_id = ? ORDER BY repeat", [run_id]).fetchall()]
        n_prompts = scalar(con, "SELECT count(DISTINCT prompt_id) FROM generations WHERE run_id = ?", [run_id])
    return models, modes, repeats, int(n_prompts)


def some_runs(db: str | os.PathLike, limit: int = 20) -> list[str]:
    """Up to ``limit`` stored run ids (for an 'unknown run' message)."""
    with reader(db) as con:
        return known_runs(con, limit)


def run_prompts(db: str | os.PathLike, run_id: str, search: str | None, limit: int, offset: int) -> pd.DataFrame:
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
    """The prompt of a run's dataset: prompt_id, subject, question, choices (JSON text), gold, user_prompt."""
    return query_df(db, """
        SELECT p.prompt_id, p.subject, p.question, CAST(p.choices AS VARCHAR) AS choices, p.gold, p.user_prompt
        FROM runs r JOIN prompts p ON p.dataset_id = r.dataset_id
        WHERE r.run_id = ? AND p.prompt_id = ?""", [run_id, prompt_id])


def unit_rows(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int) -> pd.DataFrame:
    """Every generation of one unit (all models, both modes) with one score per generation (the
    'paper' rule if scored, else the first other rule): model, mode, text, n_tokens, finish_reason,
    seed, rule, extracted, score."""
    return query_df(db, """
        SELECT g.model, g.mode, g.text, g.n_tokens, g.finish_reason, CAST(g.seed AS VARCHAR) AS seed,
               s.rule, s.extracted, s.score
        FROM generations g
        LEFT JOIN (SELECT *, row_number() OVER (PARTITION BY run_id, model, prompt_id, repeat, mode
                                                 ORDER BY rule <> 'paper', rule) AS rk
                   FROM scores WHERE run_id = ? AND prompt_id = ? AND repeat = ?) s
             ON s.model = g.model AND s.mode = g.mode AND s.rk = 1
        WHERE g.run_id = ? AND g.prompt_id = ? AND g.repeat = ?
        ORDER BY g.mode, g.model""", [run_id, prompt_id, int(repeat), run_id, prompt_id, int(repeat)])


def generation_rows(db: str | os.PathLike, run_id: str, limit: int, offset: int) -> pd.DataFrame:
    """One page of a run's generations: model, prompt_id, repeat, mode, n_tokens, finish_reason, text."""
    return query_df(db, """
        SELECT model, prompt_id, repeat, mode, n_tokens, finish_reason, text FROM generations
        WHERE run_id = ? ORDER BY prompt_id, repeat, mode, model LIMIT ? OFFSET ?""",
                    [run_id, int(limit), int(offset)])
