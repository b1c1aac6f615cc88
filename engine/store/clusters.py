"""Store layer of semantic clusters: its tables and SQL.

The ``clusters`` table (semantic clusters of a prompt's generations): the SQL of the clustering
task."""

from __future__ import annotations

import os

import pandas as pd

from engine.store.db import insert_df, query_df, reader, transaction

CLUSTER_COLUMNS = ("run_id", "model", "prompt_id", "repeat", "mode", "method", "cluster_id")


def cluster_inputs(db: str | os.PathLike, run: str) -> tuple[str | None, pd.DataFrame]:
    """The run dataset's kind and every generation of ``run`` with its prompt's gold, choices and
    question: columns model, prompt_id, repeat, mode, text, gold, choices (JSON text), question;
    ordered by model, mode, prompt_id, repeat."""
    with reader(db) as con:
        row = con.execute(
            """SELECT r.dataset_id, d.kind FROM runs r LEFT JOIN datasets d USING (dataset_id)
                             WHERE r.run_id = ?""",
            [run],
        ).fetchone()
        dataset, kind = row if row else (None, None)
        gens = con.execute(
            """SELECT g.model, g.prompt_id, g.repeat, g.mode, g.text, p.gold,
                      CAST(p.choices AS VARCHAR) AS choices,
                      coalesce(p.question, p.user_prompt) AS question
               FROM generations g LEFT JOIN prompts p ON p.prompt_id = g.prompt_id AND p.dataset_id = ?
               WHERE g.run_id = ? ORDER BY g.model, g.mode, g.prompt_id, g.repeat""",
            [dataset, run],
        ).df()
    return kind, gens


def replace_clusters(db: str | os.PathLike, run: str, method: str, rows: pd.DataFrame) -> None:
    """Replace the run's clusters of ``method`` by ``rows`` (columns :data:`CLUSTER_COLUMNS`) in one
    transaction."""
    with transaction(db) as con:
        con.execute("DELETE FROM clusters WHERE run_id = ? AND method = ?", [run, method])
        insert_df(con, "clusters", rows, list(CLUSTER_COLUMNS))


def cluster_methods(db: str | os.PathLike, run: str) -> list[str]:
    """Clustering methods stored for ``run`` (the data map's choices)."""
    df = query_df(db, "SELECT DISTINCT method FROM clusters WHERE run_id = ? ORDER BY method", [run])
    return [str(m) for m in df["method"]]
