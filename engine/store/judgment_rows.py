"""Typed reads of the ``judgments`` table for the win-rate analysis (engine.analysis.winrates).

(The judge-verdicts family; kept in its own module this round so that parallel additions to a
``verdicts.py`` do not collide: the lead may fold it in.)
"""

from __future__ import annotations

import os

import pandas as pd

from engine.store.db import query_df


def judgment_frame(db: str | os.PathLike, run: str, mode: str, judge: str | None) -> pd.DataFrame:
    """A run's verdicts in one mode, unparseable ones included (``judge_winner`` NULL), with the
    judgement unit and presentation order (for position bias).

    Returns:
        DataFrame of prompt_id, model_a, model_b, human_winner (NULL), judge_winner, presented, unit.
    """
    sql = """SELECT prompt_id, model_a, model_b, NULL::VARCHAR AS human_winner, winner AS judge_winner, presented,
                    judge || '|' || prompt_id || '|' || CAST(repeat AS VARCHAR) || '|' || model_a || '|' || model_b
                    AS unit
             FROM judgments WHERE run_id = ? AND mode = ?"""
    params: list = [run, mode]
    if judge is not None:
        sql += " AND judge = ?"
        params.append(judge)
    return query_df(db, sql + " ORDER BY prompt_id, repeat, model_a, model_b, presented", params)
