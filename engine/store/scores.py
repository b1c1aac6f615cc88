"""Scores and imported runs: the SQL of scoring a run and of storing an import in one transaction."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd

from engine.errors import UserError
from engine.store.db import insert_df, reader, scalar, transaction
from engine.store.runs import require_run

SCORE_COLUMNS = ["run_id", "model", "prompt_id", "repeat", "mode", "rule", "extracted", "score"]
GENERATION_COLUMNS = ["run_id", "model", "prompt_id", "repeat", "mode", "seed", "text"]
PROMPT_COLUMNS = ["dataset_id", "prompt_id", "idx", "subject", "question", "choices", "gold", "user_prompt"]


def run_dataset(con: duckdb.DuckDBPyConnection, run: str) -> str | None:
    """The dataset id of a stored run (UserError for an unknown run)."""
    require_run(con, run)
    row = con.execute("SELECT dataset_id FROM runs WHERE run_id = ?", [run]).fetchone()
    return None if row is None else row[0]


def run_dataset_kind(db: str | os.PathLike, run: str) -> tuple[str | None, str | None]:
    """(dataset id, dataset kind) of a stored run."""
    with reader(db) as con:
        dataset = run_dataset(con, run)
        row = con.execute("SELECT kind FROM datasets WHERE dataset_id = ?", [dataset]).fetchone()
    return dataset, None if row is None else row[0]


@dataclass(frozen=True)
class ScoringInput:
    """What scoring a run reads: gold/choices per prompt, the generations, the run's state."""
    prompts: dict[str, tuple[Any, Any]]
    generations: pd.DataFrame          # model, prompt_id, repeat, mode, text
    status: str | None
    n_units: int | None


def scoring_input(db: str | os.PathLike, run: str) -> ScoringInput:
    with reader(db) as con:
        dataset = run_dataset(con, run)
        prompts = {pid: (gold, choices) for pid, gold, choices in con.execute(
            "SELECT prompt_id, gold, CAST(choices AS VARCHAR) FROM prompts WHERE dataset_id = ?", [dataset]).fetchall()}
        gens = con.execute("""SELECT model, prompt_id, repeat, mode, text FROM generations
                              WHERE run_id = ? ORDER BY model, mode, prompt_id, repeat""", [run]).df()
        state = con.execute("SELECT status, n_units FROM runs WHERE run_id = ?", [run]).fetchone()
    status, n = (state[0], state[1]) if state is not None else (None, None)
    return ScoringInput(prompts, gens, status, None if n is None else int(n))


def replace_scores(db: str | os.PathLike, run: str, rule: str, scores: pd.DataFrame) -> None:
    """The run's scores for ``rule`` replaced by ``scores`` (columns :data:`SCORE_COLUMNS`), atomically."""
    with transaction(db) as con:
        con.execute("DELETE FROM scores WHERE run_id = ? AND rule = ?", [run, rule])
        insert_df(con, "scores", scores, SCORE_COLUMNS)


@dataclass(frozen=True)
class ImportRows:
    """One imported run: its dataset's prompts, generations, scores, models and run record."""
    run_id: str
    dataset_id: str
    dataset_source: str
    kind: str
    prompts: pd.DataFrame       # PROMPT_COLUMNS (choices as JSON text or None)
    generations: pd.DataFrame   # GENERATION_COLUMNS
    scores: pd.DataFrame        # SCORE_COLUMNS
    models: pd.DataFrame        # name, source, variant, vocab_id, config
    config: dict
    code_version: str
    key_mode: str | None = "token_id"
    replace_run: bool = False   # True: every earlier row of the run goes; False: only these models' rows


def store_import(db: str | os.PathLike, rows: ImportRows) -> int:
    """Write an import in ONE transaction (all or nothing; re-imports replace, never duplicate).

    Returns the run's number of generations afterwards.
    """
    pids, names = rows.prompts["prompt_id"].tolist(), rows.models["name"].tolist()
    with transaction(db) as con:
        con.execute("SET enable_progress_bar = false")  # stderr belongs to our own messages
        con.execute("DELETE FROM prompts WHERE dataset_id = ? AND list_contains(?, prompt_id)", [rows.dataset_id, pids])
        insert_df(con, "prompts", rows.prompts, PROMPT_COLUMNS, casts={"choices": "JSON"})
        for table in ("generations", "scores"):  # fixed table names
            if rows.replace_run:
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [rows.run_id])
            else:
                con.execute(f"DELETE FROM {table} WHERE run_id = ? AND list_contains(?, model) "
                            "AND list_contains(?, prompt_id)", [rows.run_id, names, pids])
        insert_df(con, "generations", rows.generations, GENERATION_COLUMNS)
        insert_df(con, "scores", rows.scores, SCORE_COLUMNS)
        insert_df(con, "models", rows.models, ["name", "source", "variant", "vocab_id", "config"],
                  casts={"config": "JSON"}, conflict="OR IGNORE")
        n_prompts = scalar(con, "SELECT count(*) FROM prompts WHERE dataset_id = ?", [rows.dataset_id])
        con.execute("INSERT OR REPLACE INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, ?, ?)",
                    [rows.dataset_id, rows.dataset_source, rows.kind, n_prompts])
        n_units = scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [rows.run_id])
        con.execute("INSERT OR REPLACE INTO runs (run_id, dataset_id, config, code_version, key_mode, "
                    "warnings, status, n_units) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [rows.run_id, rows.dataset_id, json.dumps(rows.config), rows.code_version, rows.key_mode,
                     json.dumps([]), "done", n_units])
    return int(n_units)


def run_exists(db: str | os.PathLike, run: str) -> bool:
    if not os.path.exists(db):
        return False
    with reader(db) as con:
        return bool(scalar(con, "SELECT count(*) FROM runs WHERE run_id = ?", [run]))


def imported_facts(db: str | os.PathLike, run: str) -> dict | None:
    """The ``imported`` block of a run's config (harness, source, headline accuracies), or None."""
    with reader(db) as con:
        row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run]).fetchone()
    if row is None or row[0] is None:
        return None
    cfg = json.loads(row[0])
    return cfg.get("imported") if isinstance(cfg, dict) else None


def per_question_scores(db: str | os.PathLike, run: str, rule: str | None = None) -> pd.DataFrame:
    """model, prompt_id, repeat, mode, score of a run's non-null scores (``rule`` None: the run's
    only rule, or 'harness' when imported)."""
    with reader(db) as con:
        require_run(con, run)
        rules = [r[0] for r in con.execute("SELECT DISTINCT rule FROM scores WHERE run_id = ? ORDER BY 1",
                                           [run]).fetchall()]
        if rule is None:
            rule = "harness" if "harness" in rules else rules[0] if len(rules) == 1 else None
        if rule is None or rule not in rules:
            raise UserError(f"run {run!r} has scores for rules {rules or '(none)'}; pick one with --rule")
        return con.execute("""SELECT model, prompt_id, repeat, mode, score FROM scores
                              WHERE run_id = ? AND rule = ? AND score IS NOT NULL
                              ORDER BY model, mode, prompt_id, repeat""", [run, rule]).df()
