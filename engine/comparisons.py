"""Pairwise comparisons: reading, validating and normalising human / judge preference files.

Normalised form (one row per comparison): prompt_id, model_a, model_b, human_winner,
judge_winner, with winners in {"a", "b", "tie"} or None (no label).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from engine.errors import UserError

_WINNER_MAP = {
    "a": "a", "model_a": "a",
    "b": "b", "model_b": "b",
    "tie": "tie", "tie (bothbad)": "tie",
}
ALLOWED_WINNERS = tuple(_WINNER_MAP)


def normalise_winner(value) -> str | None:
    """Map a winner label to 'a' | 'b' | 'tie' (None for an empty label). Raises UserError."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    v = str(value).strip().lower()
    if v == "":
        return None
    if v not in _WINNER_MAP:
        raise UserError(f"unknown winner value {value!r}; allowed: {', '.join(ALLOWED_WINNERS)} or empty")
    return _WINNER_MAP[v]


def _read_arena_lines(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        raise UserError(f"file not found: {p}")
    rows = []
    with p.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{p}: line {lineno} is not valid JSON ({exc.msg})") from None
            for key in ("model_a", "model_b", "winner"):
                if key not in obj:
                    raise UserError(f"{p}: line {lineno} has no {key!r} field")
            rows.append(obj)
    if not rows:
        raise UserError(f"{p}: no comparisons in file")
    return rows


def read_arena(human: str | Path | None, judge: str | Path | None = None,
               models: list[str] | None = None) -> pd.DataFrame:
    """Read Chatbot Arena JSON-lines files (line-aligned human and judge files) into normalised rows.

    ``models`` keeps only comparisons whose two models are both in the list.
    """
    if human is None and judge is None:
        raise UserError("give at least one of the human or the judge file")
    h = _read_arena_lines(human) if human is not None else None
    j = _read_arena_lines(judge) if judge is not None else None
    if h is not None and j is not None and len(h) != len(j):
        raise UserError(f"human and judge files are not line-aligned: {len(h)} vs {len(j)} lines")
    base = h if h is not None else j
    out = []
    for i, row in enumerate(base):
        if j is not None and h is not None:
            jr = j[i]
            if (jr["model_a"], jr["model_b"]) != (row["model_a"], row["model_b"]):
                raise UserError(f"line {i + 1}: human and judge files disagree on the models")
        out.append({
            "prompt_id": str(row.get("question_id", row.get("num", i))),
            "model_a": row["model_a"], "model_b": row["model_b"],
            "human_winner": normalise_winner(row["winner"]) if h is not None else None,
            "judge_winner": normalise_winner(j[i]["winner"]) if j is not None else None,
        })
    df = pd.DataFrame(out)
    if models:
        keep = set(models)
        df = df[df.model_a.isin(keep) & df.model_b.isin(keep)].reset_index(drop=True)
        if df.empty:
            raise UserError(f"no comparison involves only the models {sorted(keep)}")
    return df
