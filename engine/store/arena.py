"""Chatbot Arena JSON lines (a human file and/or a line-aligned judge file): validation listing
every problem (:func:`validate_arena`) and reading (:func:`read_arena`), in the normalised form of
:mod:`engine.store.comparison_files` (whose encoding policy applies: UTF-8, optional BOM, or UTF-16
with a BOM)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from engine.errors import UserError
from engine.store.comparison_files import (
    MAX_UPLOAD_BYTES,
    NORMALISED_COLUMNS,
    Problem,
    _check_pair,
    _label,
    _winner,
    read_text,
    require_file,
    with_optional_columns,
)
from engine.store.jsonl import parse_object


def arena_prompt_id(row: dict, i: int) -> str | None:
    """An Arena line's prompt id: its question_id, else its num, else the line's index; a JSON
    null stays None (stored as NULL, never as the string "None")."""
    for key in ("question_id", "num"):
        if key in row:
            return None if row[key] is None else str(row[key])
    return str(i)


def _parse_arena_line(line: str) -> tuple[dict | None, str | None, str | None]:
    """One JSON line -> (object, None, None) or (None, field, problem). Never raises: deep nesting
    (RecursionError), numbers over Python's digit limit (ValueError) and wrong types are problems."""
    obj, problem = parse_object(line)
    if obj is None:
        return None, None, problem
    for key in ("model_a", "model_b", "winner"):
        if key not in obj:
            return None, key, f"missing field {key!r}"
        if not isinstance(obj[key], str) or not obj[key].strip():
            return None, key, f"must be non-blank text, got {_describe(obj[key])}"
    for key in (
        "num",
        "question_id",
        "category",
    ):  # optional ids and the prompt's category: a scalar (a key, a prompt id, a slice's name)
        v = obj.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
            return None, key, f"must be an integer or a string, got {_describe(v)}"
    return obj, None, None


def _describe(v) -> str:
    kind = {
        dict: "an object",
        list: "an array",
        bool: "a boolean",
        type(None): "null",
        float: "a number",
        int: "a number",
        str: "text",
    }.get(type(v), type(v).__name__)
    return (
        f"{kind} ({_short(v)})" if isinstance(v, (str, int, float)) and not isinstance(v, bool) else kind
    )


def _short(v) -> str:
    t = (
        repr(v)
        if not isinstance(v, int) or abs(v) < 10**30
        else f"{str(v)[:12]}... ({len(str(abs(v)))} digits)"
    )
    return t if len(t) <= 40 else t[:37] + "..."


def _arena_lines(source, max_bytes: int, problems: list[Problem]) -> list[tuple[int, dict]] | None:
    label = _label(source)
    text = read_text(source, max_bytes, problems)
    if text is None:
        return None
    rows, n_before = [], len(problems)
    # split on "\n" only: JSON strings may hold U+2028 and other characters str.splitlines() breaks on
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        obj, field, msg = _parse_arena_line(line)
        if obj is None:
            problems.append(Problem(lineno, field, msg or "bad line", label))
            continue
        rows.append((lineno, obj))
    if not rows and len(problems) == n_before:
        problems.append(Problem(None, None, "no comparisons in file", label))
    return rows


def validate_arena(
    human=None,
    judge=None,
    known_models: list[str] | set[str] | None = None,
    max_bytes: int = MAX_UPLOAD_BYTES,
) -> tuple[pd.DataFrame, list[Problem]]:
    """Validate Chatbot Arena JSON-lines files (human and/or a line-aligned judge file).

    Each line: {"num", "question_id", "model_a", "model_b", "winner"}, and optionally "category" (the
    prompt's category, text or an integer; the slices of ``winrates --by category``). Problems: size, empty,
    encoding, invalid JSON, missing fields, bad winners, model_a == model_b, unknown models,
    duplicate ``num``, and (with both files) different line counts or models on a line.

    Returns:
        (DataFrame in :func:`read_arena`'s normalised form, identical to its output for a valid
        file; list of Problem with line numbers).
    """
    if human is None and judge is None:
        raise UserError("give at least one of the human or the judge file")
    problems: list[Problem] = []
    empty = pd.DataFrame(columns=list(NORMALISED_COLUMNS))
    h = _arena_lines(human, max_bytes, problems) if human is not None else None
    j = _arena_lines(judge, max_bytes, problems) if judge is not None else None
    if problems:
        return empty, _as_lines(problems)
    known = set(known_models) if known_models is not None else None
    if h is not None and j is not None and len(h) != len(j):
        return empty, [
            Problem(
                None,
                None,
                f"human and judge files are not line-aligned: {len(h)} vs {len(j)} comparisons",
            )
        ]
    base = h if h is not None else j
    assert base is not None  # at least one file was given (checked above)
    base_label = _label(human if h is not None else judge)
    out: list[dict] = []
    seen_num: dict[object, int] = {}  # Arena "num" -> first line
    for i, (lineno, row) in enumerate(base):
        human_w = (
            _winner(row["winner"], lineno, "winner", _label(human), problems) if h is not None else None
        )
        judge_w = None
        if j is not None:
            jl, jr = j[i]
            judge_w = _winner(jr["winner"], jl, "winner", _label(judge), problems)
            if h is not None and (jr["model_a"], jr["model_b"]) != (row["model_a"], row["model_b"]):
                problems.append(
                    Problem(
                        lineno,
                        "model_a",
                        f"human and judge files disagree on the models "
                        f"({row['model_a']} vs {row['model_b']} / "
                        f"{jr['model_a']} vs {jr['model_b']})",
                        base_label,
                    )
                )
        _check_pair(lineno, row["model_a"], row["model_b"], known, base_label, problems)
        if "num" in row:
            if row["num"] in seen_num:
                problems.append(
                    Problem(
                        lineno,
                        "num",
                        f"duplicate num {row['num']!r} (first on line {seen_num[row['num']]})",
                        base_label,
                    )
                )
            else:
                seen_num[row["num"]] = lineno
        out.append(
            {
                "prompt_id": arena_prompt_id(row, i),  # a null question_id is NULL, never "None"
                "model_a": row["model_a"],
                "model_b": row["model_b"],
                "human_winner": human_w,
                "judge_winner": judge_w,
                "category": arena_category(row, j[i][1] if j is not None else None),
            }
        )
    frame = pd.DataFrame(out, columns=[*NORMALISED_COLUMNS, "category"])
    return with_optional_columns(frame), _as_lines(problems)


def arena_category(row: dict, other: dict | None = None) -> str | None:
    """An Arena line's ``category`` field as text (the slice of ``winrates --by category``), from the
    human line, else the line-aligned judge line; None where neither has one (or it is blank)."""
    for r in (row, other or {}):
        v = r.get("category")
        if v is not None and str(v).strip():
            return str(v).strip()
    return None


def _as_lines(problems: list[Problem]) -> list[Problem]:
    """JSON-lines problems are numbered by line."""
    return [replace(p, unit="line") for p in problems]


def read_arena(
    human: str | Path | None, judge: str | Path | None = None, models: list[str] | None = None
) -> pd.DataFrame:
    """Read Chatbot Arena JSON-lines files (line-aligned human and judge files) into normalised rows.

    The same validation as an upload (:func:`validate_arena`, no size limit): any problem (bad
    JSON, a field of the wrong type, a non-UTF-8 file, lines that disagree) is ONE UserError naming
    the file, the line and the field. ``models`` keeps only comparisons whose two models are both in
    the list.
    """
    if human is None and judge is None:
        raise UserError("give at least one of the human or the judge file")
    for f in (human, judge):
        if f is not None:
            require_file(f)
    df, problems = validate_arena(human, judge, max_bytes=2**62)
    if problems:
        more = (
            f" ({len(problems)} problems in all; `python -m engine import comparisons` lists them)"
            if len(problems) > 1
            else ""
        )
        raise UserError(f"{problems[0]}{more}")
    if models:
        keep = set(models)
        df = df[df.model_a.isin(keep) & df.model_b.isin(keep)].reset_index(drop=True)
        if df.empty:
            raise UserError(f"no comparison involves only the models {sorted(keep)}")
    return df
