"""A run's human labels as stored comparison sets: every SQL string of the judge audit's label reads.

A run's labels are the comparison sets whose meta JSON names the run (key ``run_id``, or ``run`` as
the label samples' sets write it; ``mode`` optional). Rows carry prompt_id, model_a, model_b,
human_winner and, from schema v4, repeat, mode, labeller, labelled_at, presented; on an older store
those columns read as NULL.
"""

from __future__ import annotations

import json
import os

import pandas as pd

from engine.store.db import query_df, reader, scalar

LABEL_COLUMNS = (
    "prompt_id",
    "model_a",
    "model_b",
    "human_winner",
    "repeat",
    "mode",
    "labeller",
    "labelled_at",
    "presented",
)
_OPTIONAL = {
    "repeat": "INTEGER",
    "mode": "VARCHAR",
    "labeller": "VARCHAR",
    "labelled_at": "TIMESTAMP",
    "presented": "VARCHAR",
}


def _has_sets(con) -> bool:
    return bool(
        scalar(
            con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'comparison_sets'"
        )
    )


def run_label_sets(db: str | os.PathLike, run: str) -> list[tuple[str, str | None]]:
    """(name, mode) of every stored comparison set whose meta names ``run`` (key ``run_id`` or ``run``),
    oldest first."""
    with reader(db) as con:
        if not _has_sets(con):
            return []
        rows = con.execute(
            "SELECT name, CAST(meta AS VARCHAR) FROM comparison_sets ORDER BY created_at, name"
        ).fetchall()
    out = []
    for name, meta in rows:
        try:
            m = json.loads(meta) if meta else {}
        except json.JSONDecodeError:
            continue
        if isinstance(m, dict) and run in (
            m.get("run_id"),
            m.get("run"),
        ):  # the label samples' sets write "run"
            out.append((name, m.get("mode")))
    return out


def set_label_rows(db: str | os.PathLike, name: str) -> pd.DataFrame:
    """The human-labelled rows of set ``name`` in file order, as :data:`LABEL_COLUMNS` (+ row_idx);
    the schema-v4 columns a store lacks read as NULL."""
    with reader(db) as con:
        have = {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'comparisons'"
            ).fetchall()
        }
    cols = [
        c if c in have or c not in _OPTIONAL else f"NULL::{_OPTIONAL[c]} AS {c}" for c in LABEL_COLUMNS
    ]
    return query_df(
        db,
        f"SELECT row_idx, {', '.join(cols)} FROM comparisons "  # column names are constants
        "WHERE set_name = ? AND human_winner IS NOT NULL ORDER BY row_idx",
        [name],
    )


def set_label_count(db: str | os.PathLike, names: list[str]) -> int:
    """How many human labels the stored sets ``names`` hold (a cheap cache key for pages that refresh
    as labels arrive; 0 for no names, without opening the database)."""
    if not names:
        return 0
    with reader(db) as con:
        return int(
            scalar(
                con,
                f"SELECT count(human_winner) FROM comparisons WHERE set_name IN "
                f"({', '.join('?' * len(names))})",
                names,
            )
        )  # placeholders only
