"""Reads the judge audit's bias figures need (persistence layer): the responses' lengths of a run, and the
model a provider reported for each verdict (``judgments.reported_model``, schema v3). Every SQL string of
these reads is here."""

from __future__ import annotations

import os

import pandas as pd

from engine.store.db import query_df


def generation_lengths(db: str | os.PathLike, run: str) -> pd.DataFrame:
    """Per generation of ``run``: model, prompt_id, repeat, mode, n_tokens (NULL when not recorded) and
    chars (the text's length in characters)."""
    return query_df(
        db,
        """SELECT model, prompt_id, repeat, mode, n_tokens, length(coalesce(text, '')) AS chars
           FROM generations WHERE run_id = ?""",
        [run],
    )


def reported_models(
    db: str | os.PathLike, run: str, judge: str, mode: str | None = None
) -> pd.DataFrame:
    """reported_model (NULL: not recorded), n: how many verdicts of ``judge`` on ``run`` each model the
    provider reported gave, most first."""
    sql = (
        "SELECT reported_model, count(*) AS n FROM judgments WHERE run_id = ? AND judge = ?"
        + (" AND mode = ?" if mode else "")
        + " GROUP BY reported_model ORDER BY n DESC, reported_model"
    )
    return query_df(db, sql, [run, judge] + ([mode] if mode else []))
