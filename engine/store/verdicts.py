"""The ``judgments`` table (LLM-judge verdicts): every SQL string against it.

Typed reads and writes for :mod:`engine.tasks.judge`, and the verdicts read as comparisons by the
win-rate analyses; nothing here knows how a verdict is made.
A verdict row is keyed by (run, judge, prompt_id, repeat, mode, model_a, model_b, presented).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields

import pandas as pd

from engine.store.db import insert_df, query_df, reader, transaction

VerdictKey = tuple[str, int, str, str, str, str]  # prompt_id, repeat, mode, model_a, model_b, presented


@dataclass(frozen=True)
class VerdictRow:
    """One stored verdict: the columns of ``judgments`` in table order (schema v3)."""

    run_id: str
    judge: str
    prompt_id: str
    repeat: int
    mode: str
    model_a: str
    model_b: str
    presented: str
    judge_prompt_hash: str
    raw: str | None
    parsed: str | None
    winner: str | None
    reported_model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    attempts: int | None = None
    error: str | None = None


COLUMNS = tuple(f.name for f in fields(VerdictRow))
_CASTS = {c: "VARCHAR" for c in COLUMNS} | {
    "repeat": "INTEGER",
    "prompt_tokens": "INTEGER",
    "completion_tokens": "INTEGER",
    "latency_s": "DOUBLE",
    "attempts": "INTEGER",
}


def generation_keys(db: str | os.PathLike, run: str) -> pd.DataFrame:
    """(model, prompt_id, repeat, mode) of every stored generation of ``run``."""
    return query_df(db, "SELECT model, prompt_id, repeat, mode FROM generations WHERE run_id = ?", [run])


def configured_models(db: str | os.PathLike, run: str) -> list[str]:
    """The run's models in its configured order (``runs.config.models``); [] when unknown."""
    with reader(db) as con:
        row = con.execute("SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = ?", [run]).fetchone()
    if not row or not row[0]:
        return []
    try:
        cfg = json.loads(row[0])
    except json.JSONDecodeError:
        return []
    models = cfg.get("models", []) if isinstance(cfg, dict) else []
    return [
        m if isinstance(m, str) else str(m.get("name") if isinstance(m, dict) else m) for m in models
    ]


def prompt_hashes(db: str | os.PathLike, run: str, judge: str) -> set[str]:
    """The judge-prompt hashes of the verdicts stored for (run, judge)."""
    with reader(db) as con:
        return {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT judge_prompt_hash FROM judgments WHERE run_id = ? AND judge = ?",
                [run, judge],
            ).fetchall()
        }


def stored_keys(db: str | os.PathLike, run: str, judge: str, *, failed: bool = True) -> set[VerdictKey]:
    """The keys of every verdict stored for (run, judge): what a rerun must not ask again.
    ``failed=False``: only the answered ones (parsed or not), leaving out requests that failed
    for good (``error`` set), which a rerun sends again."""
    with reader(db) as con:
        rows = con.execute(
            "SELECT prompt_id, repeat, mode, model_a, model_b, presented FROM judgments "
            "WHERE run_id = ? AND judge = ?" + ("" if failed else " AND error IS NULL"),
            [run, judge],
        ).fetchall()
    return {(p, int(r), m, a, b, o) for p, r, m, a, b, o in rows}


def delete_verdicts(db: str | os.PathLike, run: str, judge: str) -> None:
    with transaction(db) as con:
        con.execute("DELETE FROM judgments WHERE run_id = ? AND judge = ?", [run, judge])


def insert_verdicts(db: str | os.PathLike, rows: Sequence[VerdictRow]) -> None:
    """Store ``rows`` in one (small) transaction: all or none."""
    if not rows:
        return
    df = pd.DataFrame([astuple(r) for r in rows], columns=list(COLUMNS), dtype=object)
    with transaction(db) as con:  # one set-based statement: executemany costs ~1 ms a row
        insert_df(con, "judgments", df, COLUMNS, casts=_CASTS, conflict="OR REPLACE")


def texts_for(
    db: str | os.PathLike, run: str, keys: Iterable[tuple[str, str, int, str]], prompt_ids: Sequence[str]
) -> tuple[dict, dict]:
    """The generation texts of ``keys`` (model, prompt_id, repeat, mode) and the question of each prompt.

    Returns ({(model, prompt_id, repeat, mode): text}, {prompt_id: question}).
    """
    keys = list(keys)
    pids = list(prompt_ids)
    with reader(db) as con:
        con.execute(
            "CREATE TEMP TABLE _want (model VARCHAR, prompt_id VARCHAR, repeat INTEGER, mode VARCHAR)"
        )
        con.executemany("INSERT INTO _want VALUES (?, ?, ?, ?)", [list(k) for k in keys])
        rows = con.execute(
            """SELECT g.model, g.prompt_id, g.repeat, g.mode, g.text FROM generations g
                              JOIN _want w USING (model, prompt_id, repeat, mode) WHERE g.run_id = ?""",
            [run],
        ).fetchall()
        q = (
            con.execute(
                f"""SELECT p.prompt_id, coalesce(p.user_prompt, p.question) FROM prompts p
                            JOIN runs r ON r.dataset_id = p.dataset_id
                            WHERE r.run_id = ? AND p.prompt_id IN ({", ".join("?" * len(pids))})""",
                [run, *pids],
            ).fetchall()
            if pids
            else []
        )  # placeholders only; values are parameters
    return {(m, p, int(r), mo): t for m, p, r, mo, t in rows}, {p: qq for p, qq in q}


@dataclass(frozen=True)
class VerdictTotals:
    """What is stored for (run, judge): verdict counts (overall and per mode) and request totals."""

    counts: dict[str, int]
    by_mode: dict[str, dict[str, int]]
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    n_errors: int
    mean_latency_s: float | None


def verdict_totals(db: str | os.PathLike, run: str, judge: str) -> VerdictTotals:
    """Counts of A / B / tie / unparseable (overall and per mode), token, attempt and error totals."""
    with reader(db) as con:
        stored = con.execute(
            """SELECT mode, coalesce(parsed, 'unparseable') AS v, count(*) FROM judgments
                                WHERE run_id = ? AND judge = ? GROUP BY 1, 2""",
            [run, judge],
        ).fetchall()
        usage = con.execute(
            """SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0),
                                      coalesce(sum(attempts), 0), count(error), avg(latency_s)
                               FROM judgments WHERE run_id = ? AND judge = ?""",
            [run, judge],
        ).fetchone()
    empty = {k: 0 for k in ("A", "B", "tie", "unparseable")}
    totals, by_mode = dict(empty), {}  # type: tuple[dict[str, int], dict[str, dict[str, int]]]
    for mode, v, n in stored:
        totals[v] += int(n)
        by_mode.setdefault(mode, dict(empty))[v] += int(n)
    pt, ct, att, nerr, lat = usage if usage is not None else (0, 0, 0, 0, None)
    return VerdictTotals(
        totals, by_mode, int(pt), int(ct), int(att), int(nerr), None if lat is None else float(lat)
    )


def verdict_winners(
    db: str | os.PathLike, run: str, judge: str, mode: str | None = None
) -> pd.DataFrame:
    """prompt_id, repeat, mode, model_a, model_b, presented, winner of the stored verdicts, ordered."""
    sql = (
        "SELECT prompt_id, repeat, mode, model_a, model_b, presented, winner FROM judgments "
        "WHERE run_id = ? AND judge = ?"
        + (" AND mode = ?" if mode else "")
        + " ORDER BY mode, prompt_id, repeat, model_a, model_b, presented"
    )
    return query_df(db, sql, [run, judge] + ([mode] if mode else []))


# ---- the win-rate analyses' reads (engine.analysis.winrates / comparisons)


def judgment_groups(db: str | os.PathLike) -> pd.DataFrame:
    """LLM-judge verdict groups: (run_id, judge, mode, n, n_models, n_unparsed)."""
    return query_df(
        db,
        """
        SELECT run_id, judge, mode, count(*) AS n,
               count(DISTINCT model_a) + 0 AS n_models, count(*) FILTER (WHERE winner IS NULL) AS n_unparsed
        FROM judgments GROUP BY run_id, judge, mode ORDER BY run_id, judge, mode""",
    )


def judgment_rows(
    db: str | os.PathLike, run_id: str, mode: str | None = None, judge: str | None = None
) -> pd.DataFrame:
    """A run's judge verdicts as normalised rows (judge_winner; both presentation orders are rows), with
    the optional columns: repeat, mode, labeller (the judge), labelled_at (NULL), presented."""
    sql = """SELECT prompt_id, model_a, model_b, NULL::VARCHAR AS human_winner, winner AS judge_winner,
                    repeat, mode, judge AS labeller, NULL::TIMESTAMP AS labelled_at, presented
             FROM judgments WHERE run_id = ?"""
    params: list = [run_id]
    if mode is not None:
        sql += " AND mode = ?"
        params.append(mode)
    if judge is not None:
        sql += " AND judge = ?"
        params.append(judge)
    return query_df(db, sql + " ORDER BY prompt_id, repeat, model_a, model_b, presented", params)


def judgment_frame(db: str | os.PathLike, run: str, mode: str, judge: str | None) -> pd.DataFrame:
    """A run's verdicts in one mode, unparseable ones included (``judge_winner`` NULL), with the
    judgement unit and presentation order (for position bias).

    Returns:
        DataFrame of prompt_id, model_a, model_b, human_winner (NULL), judge_winner, presented, unit.
    """
    sql = """SELECT prompt_id, model_a, model_b, NULL::VARCHAR AS human_winner,
                    winner AS judge_winner, presented,
                    judge || '|' || prompt_id || '|' || CAST(repeat AS VARCHAR) || '|'
                    || model_a || '|' || model_b AS unit
             FROM judgments WHERE run_id = ? AND mode = ?"""
    params: list = [run, mode]
    if judge is not None:
        sql += " AND judge = ?"
        params.append(judge)
    return query_df(db, sql + " ORDER BY prompt_id, repeat, model_a, model_b, presented", params)
