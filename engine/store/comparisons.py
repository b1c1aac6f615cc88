"""Store layer of pairwise comparisons: its tables and SQL.

Comparison sets in the store: every SQL string that reads or writes the ``comparison_sets`` /
``comparisons`` tables (the judge verdicts read as comparisons live in :mod:`engine.store.verdicts`).

Rows come back in the normalised form (prompt_id, model_a, model_b, human_winner, judge_winner;
winners 'a' | 'b' | 'tie' or None), followed by the optional provenance columns (repeat, mode,
labeller, labelled_at, presented) and the prompt's category (None where unknown)."""

from __future__ import annotations

import json
import os

import pandas as pd

from engine.errors import UserError
from engine.store.comparison_files import ALL_COLUMNS, with_optional_columns
from engine.store.db import insert_df, query_df, reader, scalar, transaction

_ROWS = f"SELECT {', '.join(ALL_COLUMNS)} FROM comparisons WHERE set_name = ? ORDER BY row_idx"


def _exists(con, name: str) -> bool:
    return bool(scalar(con, "SELECT count(*) FROM comparison_sets WHERE name = ?", [name]))


def _known(con) -> str:
    names = [r[0] for r in con.execute("SELECT name FROM comparison_sets ORDER BY name").fetchall()]
    return ", ".join(names) or "none stored"


def set_exists(db: str | os.PathLike, name: str) -> bool:
    """Whether a set ``name`` is stored (False for a database without the tables)."""
    with reader(db) as con:
        if not scalar(
            con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'comparison_sets'"
        ):
            return False
        return _exists(con, name)


def write_set(
    db: str | os.PathLike, df: pd.DataFrame, name: str, source: str, meta: dict, replace: bool
) -> bool:
    """Store normalised rows as set ``name`` in ONE transaction; returns whether a set of that name was
    replaced. An existing name without ``replace`` is a UserError (nothing written). The optional
    columns (repeat, mode, labeller, labelled_at, presented, category) are stored when ``df`` has them."""
    rows = with_optional_columns(df).assign(set_name=name, row_idx=range(len(df)))
    with transaction(db) as con:
        exists = _exists(con, name)
        if exists and not replace:
            raise UserError(
                f"a comparison set named {name!r} already exists; choose another --name or pass "
                "--replace"
            )
        con.execute("DELETE FROM comparisons WHERE set_name = ?", [name])
        con.execute("DELETE FROM comparison_sets WHERE name = ?", [name])
        con.execute(
            "INSERT INTO comparison_sets (name, source, n_rows, meta) VALUES (?, ?, ?, ?)",
            [name, source, len(df), json.dumps(meta)],
        )
        insert_df(
            con,
            "comparisons",
            rows,
            ["set_name", "row_idx", *ALL_COLUMNS],
            casts={
                "repeat": "INTEGER",
                "mode": "VARCHAR",
                "labeller": "VARCHAR",
                "labelled_at": "TIMESTAMP",
                "presented": "VARCHAR",
                "category": "VARCHAR",
            },
        )
    return exists


def list_sets(db: str | os.PathLike) -> pd.DataFrame:
    """Every stored set: name, source, created_at, n_rows, n_human, n_judge, n_models, meta (JSON
    text)."""
    return query_df(
        db,
        """
        SELECT s.name, s.source, s.created_at, s.n_rows,
               count(c.human_winner) AS n_human, count(c.judge_winner) AS n_judge,
               (SELECT count(*) FROM (
                    SELECT model_a FROM comparisons WHERE set_name = s.name
                    UNION SELECT model_b FROM comparisons WHERE set_name = s.name)) AS n_models,
               CAST(s.meta AS VARCHAR) AS meta
        FROM comparison_sets s LEFT JOIN comparisons c ON c.set_name = s.name
        GROUP BY s.name, s.source, s.created_at, s.n_rows, s.meta ORDER BY s.created_at, s.name""",
    )


def read_set(db: str | os.PathLike, name: str) -> pd.DataFrame:
    """The rows of set ``name`` in file order; missing values are None. UserError for an unknown name."""
    with reader(db) as con:
        if not _exists(con, name):
            raise UserError(f"unknown comparison set {name!r}; stored sets: {_known(con)}")
        df = con.execute(_ROWS, [name]).df()
    out = df.astype(object).where(df.notna(), None)
    out["repeat"] = [
        None if x is None else int(x) for x in out["repeat"]
    ]  # not 1.0 (a NULL makes the column float)
    return out


def delete_set(db: str | os.PathLike, name: str) -> int:
    """Delete set ``name`` and its rows in one transaction; returns the number of rows deleted."""
    with transaction(db) as con:
        if not _exists(con, name):
            raise UserError(f"unknown comparison set {name!r}; stored sets: {_known(con)}")
        n = scalar(con, "SELECT count(*) FROM comparisons WHERE set_name = ?", [name])
        con.execute("DELETE FROM comparisons WHERE set_name = ?", [name])
        con.execute("DELETE FROM comparison_sets WHERE name = ?", [name])
    return int(n)


def set_rows(db: str | os.PathLike, name: str) -> pd.DataFrame:
    """The rows of set ``name`` as DuckDB returns them (no check that the set exists; see
    :func:`read_set`)."""
    return query_df(db, _ROWS, [name])


def set_categories(db: str | os.PathLike, name: str) -> list[str]:
    """The distinct non-blank categories of set ``name``, sorted ([] for none, or an unknown set)."""
    with reader(db) as con:
        rows = con.execute(
            "SELECT DISTINCT category FROM comparisons WHERE set_name = ? AND trim(category) <> '' "
            "ORDER BY category",
            [name],
        ).fetchall()
    return [r[0] for r in rows]
