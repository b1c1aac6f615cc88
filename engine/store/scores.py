"""Scores and imported runs: the SQL of scoring a run and of storing an import in one transaction; which
rules a run was scored with, the rule a command uses by default, and the score rows the analyses read
(the run summary, the data map, the benchmark comparison)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd

from engine.config import rule_for_dataset
from engine.errors import UserError
from engine.store.db import insert_df, query_df, reader, scalar, transaction
from engine.store.runs import require_run

SCORE_COLUMNS = ["run_id", "model", "prompt_id", "repeat", "mode", "rule", "extracted", "score"]
GENERATION_COLUMNS = ["run_id", "model", "prompt_id", "repeat", "mode", "seed", "text"]
PROMPT_COLUMNS = [
    "dataset_id",
    "prompt_id",
    "idx",
    "subject",
    "question",
    "choices",
    "gold",
    "user_prompt",
]


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
    generations: pd.DataFrame  # model, prompt_id, repeat, mode, text
    status: str | None
    n_units: int | None


def scoring_input(db: str | os.PathLike, run: str) -> ScoringInput:
    with reader(db) as con:
        dataset = run_dataset(con, run)
        prompts = {
            pid: (gold, choices)
            for pid, gold, choices in con.execute(
                "SELECT prompt_id, gold, CAST(choices AS VARCHAR) FROM prompts WHERE dataset_id = ?",
                [dataset],
            ).fetchall()
        }
        gens = con.execute(
            """SELECT model, prompt_id, repeat, mode, text FROM generations
                              WHERE run_id = ? ORDER BY model, mode, prompt_id, repeat""",
            [run],
        ).df()
        state = con.execute("SELECT status, n_units FROM runs WHERE run_id = ?", [run]).fetchone()
    status, n = (state[0], state[1]) if state is not None else (None, None)
    return ScoringInput(prompts, gens, status, None if n is None else int(n))


def replace_scores(db: str | os.PathLike, run: str, rule: str, scores: pd.DataFrame) -> None:
    """The run's scores for ``rule`` replaced by ``scores`` (columns :data:`SCORE_COLUMNS`),
    atomically."""
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
    prompts: pd.DataFrame  # PROMPT_COLUMNS (choices as JSON text or None)
    generations: pd.DataFrame  # GENERATION_COLUMNS
    scores: pd.DataFrame  # SCORE_COLUMNS
    models: pd.DataFrame  # name, source, variant, vocab_id, config
    config: dict
    code_version: str
    key_mode: str | None = "token_id"
    replace_run: bool = False  # True: every earlier row of the run goes; False: only these models' rows
    # served generations whose token traces the run copies (an import linked to `engine serve`'s run):
    # served_run, served_model, model, prompt_id, repeat, mode
    trace_links: pd.DataFrame | None = None


GENERATION_EXTRA = ["token_ids", "finish_reason", "n_tokens"]  # written when an import has them


def store_import(db: str | os.PathLike, rows: ImportRows) -> int:
    """Write an import in ONE transaction (all or nothing; re-imports replace, never duplicate).

    Returns the run's number of generations afterwards.
    """
    pids, names = rows.prompts["prompt_id"].tolist(), rows.models["name"].tolist()
    with transaction(db) as con:
        con.execute(
            "DELETE FROM prompts WHERE dataset_id = ? AND list_contains(?, prompt_id)",
            [rows.dataset_id, pids],
        )
        insert_df(con, "prompts", rows.prompts, PROMPT_COLUMNS, casts={"choices": "JSON"})
        for table in ("generations", "scores", "token_traces"):  # fixed table names
            if rows.replace_run:
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [rows.run_id])
            else:
                con.execute(
                    f"DELETE FROM {table} WHERE run_id = ? AND list_contains(?, model) "
                    "AND list_contains(?, prompt_id)",
                    [rows.run_id, names, pids],
                )
        extra = [c for c in GENERATION_EXTRA if c in rows.generations.columns]
        insert_df(
            con,
            "generations",
            rows.generations,
            GENERATION_COLUMNS + extra,
            casts={"token_ids": "INTEGER[]"} if "token_ids" in extra else None,
        )
        insert_df(con, "scores", rows.scores, SCORE_COLUMNS)
        if rows.trace_links is not None and len(rows.trace_links):
            _copy_traces(con, rows.run_id, rows.trace_links)
        insert_df(
            con,
            "models",
            rows.models,
            ["name", "source", "variant", "vocab_id", "config"],
            casts={"config": "JSON"},
            conflict="OR IGNORE",
        )
        n_prompts = scalar(con, "SELECT count(*) FROM prompts WHERE dataset_id = ?", [rows.dataset_id])
        con.execute(
            "INSERT OR REPLACE INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, ?, ?)",
            [rows.dataset_id, rows.dataset_source, rows.kind, n_prompts],
        )
        n_units = scalar(con, "SELECT count(*) FROM generations WHERE run_id = ?", [rows.run_id])
        con.execute(
            "INSERT OR REPLACE INTO runs (run_id, dataset_id, config, code_version, key_mode, "
            "warnings, status, n_units) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                rows.run_id,
                rows.dataset_id,
                json.dumps(rows.config),
                rows.code_version,
                rows.key_mode,
                json.dumps([]),
                "done",
                n_units,
            ],
        )
    return int(n_units)


def _copy_traces(con: duckdb.DuckDBPyConnection, run_id: str, links: pd.DataFrame) -> None:
    """Copy the token traces of the linked served generations into the import's run (same unit and
    mode; the model under its imported name)."""
    con.register("trace_links", links)
    try:
        con.execute(
            """INSERT OR REPLACE INTO token_traces
               SELECT ? AS run_id, l.model, t.prompt_id, t.repeat, t.mode, t.step, t.token_id,
                      t.token_text, t.prob, t.top_ids, t.top_probs, t.top_gumbels
               FROM token_traces t JOIN trace_links l
                 ON t.run_id = l.served_run AND t.model = l.served_model AND t.prompt_id = l.prompt_id
                AND t.repeat = l.repeat AND t.mode = l.mode""",
            [run_id],
        )
    finally:
        con.unregister("trace_links")


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
        rules = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT rule FROM scores WHERE run_id = ? ORDER BY 1", [run]
            ).fetchall()
        ]
        if rule is None:
            rule = "harness" if "harness" in rules else rules[0] if len(rules) == 1 else None
        if rule is None or rule not in rules:
            raise UserError(
                f"run {run!r} has scores for rules {rules or '(none)'}; pick one with --rule"
            )
        return con.execute(
            """SELECT model, prompt_id, repeat, mode, score FROM scores
                              WHERE run_id = ? AND rule = ? AND score IS NOT NULL
                              ORDER BY model, mode, prompt_id, repeat""",
            [run, rule],
        ).df()


def question_means(df: pd.DataFrame) -> pd.DataFrame:
    """The score pivot, one home: rows prompt_id, columns model, each cell the mean of the stored
    repeats' scores (NaN where the model has none). ``df``: :func:`per_question_scores`' rows of one
    mode (the caller filters the mode, models or repeat first)."""
    return df.groupby(["prompt_id", "model"])["score"].mean().unstack("model")


# ------------------------------------------------------------------ reads of the analyses (rule,
#   summary, data map)


def scored_rules(db: str | os.PathLike, run: str) -> list[str]:
    """The rules ``run`` has scores for, sorted ([] when none)."""
    df = query_df(db, "SELECT DISTINCT rule FROM scores WHERE run_id = ? ORDER BY rule", [run])
    return [str(r) for r in df["rule"]]


def newest_scored_run(db: str | os.PathLike, models: list[str] | None = None) -> str | None:
    """The newest run with scores (for every one of ``models`` when given), or None."""
    if not os.path.exists(db):
        return None
    models = list(models or [])
    df = query_df(
        db,
        """
        SELECT r.run_id FROM runs r
        WHERE (SELECT count(DISTINCT s.model) FROM scores s
               WHERE s.run_id = r.run_id AND (len(?) = 0 OR list_contains(?, s.model))) >= greatest(len(?), 1)
        ORDER BY r.created_at DESC, r.run_id LIMIT 1""",
        [models, models, models],
    )
    return None if df.empty else str(df.iloc[0, 0])


def scored_runs(db: str | os.PathLike) -> list[str]:
    """Every run with scores, newest first (the Home page's run choice)."""
    if not os.path.exists(db):
        return []
    df = query_df(
        db,
        """SELECT r.run_id FROM runs r WHERE EXISTS (SELECT 1 FROM scores s WHERE s.run_id = r.run_id)
                         ORDER BY r.created_at DESC, r.run_id""",
    )
    return [str(r) for r in df["run_id"]]


def run_rule(
    db: str | os.PathLike,
    run: str | None = None,
    models: list[str] | None = None,
    rule: str | None = None,
) -> str:
    """The scoring rule a command uses on ``run``: ``rule`` when given; else the rule that fits the
    run's dataset (:func:`engine.config.rule_for_dataset`, what ``score`` uses by default) when the
    run is scored with it, else the only (first) rule the run is scored with. ``run`` None: the
    newest run scored for all of ``models``. No scores at all: the dataset's rule (the caller's
    'no scores' error then names it)."""
    if rule is not None:
        return rule
    run = run if run is not None else newest_scored_run(db, models)
    if run is None:
        return rule_for_dataset(None)
    dataset, kind = run_dataset_kind(db, run)
    preferred = rule_for_dataset(kind, dataset)
    rules = scored_rules(db, run)
    return preferred if preferred in rules or not rules else rules[0]


@dataclass(frozen=True)
class RunFacts:
    """What a run summary needs besides the scores: dataset and kind, status, creation time, the
    rules it is scored with, generation counts and the prompts' choices and gold answers."""

    dataset_id: str | None
    kind: str | None
    status: str | None
    created_at: str | None
    rules: list[str]
    n_generations: int
    n_tokens: int
    generation_s: float | None
    choices: list
    golds: list


def run_facts(db: str | os.PathLike, run: str) -> RunFacts:
    """:class:`RunFacts` of ``run`` (UserError for an unknown run)."""
    with reader(db) as con:
        require_run(con, run)
        row = con.execute(
            """SELECT r.dataset_id, d.kind, r.status, CAST(r.created_at AS VARCHAR)
                             FROM runs r LEFT JOIN datasets d USING (dataset_id) WHERE r.run_id = ?""",
            [run],
        ).fetchone()
        dataset_id, kind, status, created = row if row else (None, None, None, None)
        rules = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT rule FROM scores WHERE run_id = ? ORDER BY rule", [run]
            ).fetchall()
        ]
        gen = con.execute(
            """SELECT count(*), coalesce(sum(n_tokens), 0),
                                    epoch(max(g.created_at)) - epoch(min(r.created_at))
                             FROM generations g JOIN runs r USING (run_id) WHERE g.run_id = ?""",
            [run],
        ).fetchone()
        n_gen, n_tok, gen_s = gen if gen else (0, 0, None)
        prompt_rows = con.execute(
            """SELECT CAST(p.choices AS VARCHAR), p.gold FROM prompts p
                                     WHERE p.dataset_id = ? AND p.prompt_id IN
                                           (SELECT DISTINCT prompt_id FROM generations WHERE run_id = ?)""",
            [dataset_id, run],
        ).fetchall()
    return RunFacts(
        dataset_id,
        kind,
        status,
        created,
        rules,
        int(n_gen),
        int(n_tok),
        None if gen_s is None else float(gen_s),
        [r[0] for r in prompt_rows],
        [r[1] for r in prompt_rows],
    )


def run_scores(db: str | os.PathLike, run: str, rule: str) -> pd.DataFrame:
    """The scored rows of ``run`` under ``rule``: model, mode, prompt_id, repeat, score, extracted
    (rows without a gold answer, score NULL, left out)."""
    return query_df(
        db,
        """
        SELECT model, mode, prompt_id, repeat, score, extracted FROM scores
        WHERE run_id = ? AND rule = ? AND score IS NOT NULL""",
        [run, rule],
    )


def model_scores(
    db: str | os.PathLike,
    run: str,
    model: str,
    mode: str,
    rule: str,
    method: str,
    subject: str | None = None,
) -> pd.DataFrame:
    """One model's scores in one mode of ``run`` under ``rule``, with the prompt's dataset order
    (idx), subject and the stored cluster of ``method``: prompt_id, repeat, score, extracted, idx,
    subject, cluster_id. UserError naming what is available when there are none."""
    sql = """SELECT s.prompt_id, s.repeat, s.score, s.extracted, coalesce(p.idx, 0) AS idx, p.subject,
                    c.cluster_id
             FROM scores s
             LEFT JOIN runs r ON r.run_id = s.run_id
             LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = s.prompt_id
             LEFT JOIN clusters c ON c.run_id = s.run_id AND c.model = s.model AND c.prompt_id = s.prompt_id
                  AND c.repeat = s.repeat AND c.mode = s.mode AND c.method = ?
             WHERE s.run_id = ? AND s.model = ? AND s.mode = ? AND s.rule = ?"""
    params: list = [method, run, model, mode, rule]
    if subject is not None:
        sql += " AND p.subject = ?"
        params.append(subject)
    with reader(db) as con:
        df = con.execute(sql, params).df()
        if df.empty:
            avail = con.execute(
                "SELECT DISTINCT run_id, model, mode, rule FROM scores ORDER BY ALL"
            ).fetchall()
            raise UserError(
                f"no scores for run={run!r} model={model!r} mode={mode!r} rule={rule!r}"
                + (f" subject={subject!r}" if subject else "")
                + f"; available (run, model, mode, rule): {avail[:20]}"
            )
    return df


def scored_generations(
    db: str | os.PathLike,
    run: str,
    model: str,
    mode: str,
    prompt_ids: list[str],
    rule: str,
    limit: int = 2000,
) -> pd.DataFrame:
    """Generations of ``prompt_ids`` (one model and mode) with gold answer, extraction and score:
    prompt_id, question, gold, repeat, extracted, score, text."""
    return query_df(
        db,
        """
        SELECT g.prompt_id, p.question, p.gold, g.repeat, s.extracted, s.score, g.text
        FROM generations g
        LEFT JOIN runs r ON r.run_id = g.run_id
        LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = g.prompt_id
        LEFT JOIN scores s ON s.run_id = g.run_id AND s.model = g.model AND s.prompt_id = g.prompt_id
             AND s.repeat = g.repeat AND s.mode = g.mode AND s.rule = ?
        WHERE g.run_id = ? AND g.model = ? AND g.mode = ? AND list_contains(?, g.prompt_id)
        ORDER BY p.idx NULLS LAST, g.prompt_id, g.repeat LIMIT ?""",
        [rule, run, model, mode, list(prompt_ids), int(limit)],
    )


# ---- the benchmark comparison's reads (engine.analysis.benchmark)


def runs_with_scores(db: str | os.PathLike) -> pd.DataFrame:
    """Which (run, model, mode, rule) have scores, with counts and the run's dataset."""
    return query_df(
        db,
        """
        SELECT s.run_id, r.dataset_id, s.model, s.mode, s.rule, count(*) AS n
        FROM scores s LEFT JOIN runs r USING (run_id)
        GROUP BY ALL ORDER BY s.run_id, s.model, s.mode, s.rule""",
    )


def _resolve_run(con, models: list[str], rule: str, run: str | None) -> str:
    """The run to analyse: ``run`` if given (checked), else the most recent run scoring all models."""
    rows = con.execute(
        """SELECT s.run_id, max(r.created_at) AS t, count(DISTINCT s.model) AS m
           FROM scores s LEFT JOIN runs r USING (run_id)
           WHERE s.rule = ? AND list_contains(?, s.model)
           GROUP BY s.run_id ORDER BY t DESC NULLS LAST, s.run_id""",
        [rule, models],
    ).fetchall()
    complete = [r[0] for r in rows if r[2] == len(set(models))]
    if run is not None:
        if run not in complete:
            raise UserError(
                f"run {run!r} has no '{rule}' scores for all of {models}; runs that do: {complete}"
            )
        return run
    if not complete:
        known = [r[0] for r in con.execute("SELECT DISTINCT model FROM scores ORDER BY 1").fetchall()]
        raise UserError(f"no run has '{rule}' scores for all of {models}; scored models: {known}")
    return complete[0]


def pair_scores(
    db: str | os.PathLike, models: list[str], subject: str | None, run: str | None, rule: str
) -> tuple[str, pd.DataFrame]:
    """The scores of ``models`` in one run (``run``, else the newest run scoring all of them under
    ``rule``).

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
            subjects = [
                r[0]
                for r in con.execute(
                    """SELECT DISTINCT p.subject FROM prompts p JOIN runs r ON r.dataset_id = p.dataset_id
                   WHERE r.run_id = ? AND p.subject IS NOT NULL ORDER BY 1""",
                    [run_id],
                ).fetchall()
            ]
            raise UserError(f"unknown subject {subject!r} for run {run_id!r}; allowed: {subjects}")
    return run_id, df


def scored_run_choices(db: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per scored run its models, rules and modes (lists) and its number of scored repeats, and per run
    the subjects with prompt counts."""
    runs = query_df(
        db,
        """
        SELECT s.run_id, list(DISTINCT s.model ORDER BY s.model) AS models,
               list(DISTINCT s.rule ORDER BY s.rule) AS rules, list(DISTINCT s.mode ORDER BY s.mode) AS modes,
               count(DISTINCT s.repeat) AS repeats
        FROM scores s GROUP BY s.run_id ORDER BY s.run_id""",
    )
    subjects = query_df(
        db,
        """
        SELECT r.run_id, p.subject, count(*) AS n FROM runs r JOIN prompts p ON p.dataset_id = r.dataset_id
        WHERE r.run_id IN (SELECT DISTINCT run_id FROM scores) AND p.subject IS NOT NULL
        GROUP BY ALL ORDER BY r.run_id, p.subject""",
    )
    return runs, subjects
