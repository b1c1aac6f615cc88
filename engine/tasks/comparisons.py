"""Task layer of pairwise comparisons: data -> stored labels.

Comparison sets: import a validated file (:mod:`engine.store.comparison_files` for CSV,
:mod:`engine.store.arena` for Chatbot Arena JSON lines) as a named set, list / read / delete /
export sets (SQL: :mod:`engine.store.comparisons`), and read the CLI's ``--comparisons`` CSV.

Nothing is written unless the whole file validates; a set is written in ONE transaction.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from engine import config
from engine.csvsafe import csv_frame
from engine.errors import UserError
from engine.store import comparisons as SC
from engine.store.arena import arena_prompt_id, read_arena, validate_arena
from engine.store.comparison_files import (
    ALLOWED_WINNERS,
    MAX_UPLOAD_BYTES,
    NORMALISED_COLUMNS,
    OPTIONAL_COLUMNS,
    InvalidUpload,
    Problem,
    _label,
    normalise_winner,
    read_comparisons_file,
    validate_comparisons_csv,
)

FORMATS = config.COMPARISON_FORMATS

__all__ = [
    "ALLOWED_WINNERS",
    "MAX_UPLOAD_BYTES",
    "NORMALISED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "FORMATS",
    "InvalidUpload",
    "Problem",
    "arena_prompt_id",
    "normalise_winner",
    "read_arena",
    "validate_arena",
    "validate_comparisons_csv",
    "import_comparisons",
    "store_comparison_set",
    "list_comparison_sets",
    "read_comparison_set",
    "delete_comparison_set",
    "export_comparison_set",
    "read_comparisons_file",
]


def _sha256(source) -> str:
    if isinstance(source, (bytes, bytearray)):
        return hashlib.sha256(source).hexdigest()
    h = hashlib.sha256()
    with Path(source).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _guess_format(source) -> str:
    if isinstance(source, (bytes, bytearray)):
        return "arena" if bytes(source).lstrip()[:1] == b"{" else "csv"
    return "arena" if Path(source).suffix.lower() in (".json", ".jsonl", ".ndjson") else "csv"


def _check_name(name: str) -> str:
    """A set name: non-blank, at most 200 characters, no control characters (a leading '-' is fine:
    jobs pass it as ``--name=VALUE``, so it is never read as an option)."""
    if not isinstance(name, str) or not name.strip():
        raise UserError("a comparison set needs a non-blank --name")
    name = name.strip()
    if len(name) > 200:
        raise UserError(f"set name is {len(name)} characters; at most 200 allowed")
    bad = sorted({c for c in name if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise UserError(
            f"set name {name!r} contains control characters ({', '.join(repr(c) for c in bad)}); "
            "use letters, digits, spaces and punctuation"
        )
    return name


def import_comparisons(
    db,
    source,
    name: str,
    *,
    judge_file=None,
    fmt: str | None = None,
    known_models: list[str] | set[str] | None = None,
    replace: bool = False,
    max_bytes: int = MAX_UPLOAD_BYTES,
) -> dict:
    """Validate ``source`` (and ``judge_file``), then store it as comparison set ``name``.

    Args:
        db: database path.
        source: CSV path/bytes (``fmt="csv"``) or Arena human JSON-lines path/bytes (``fmt="arena"``;
            may be None when only ``judge_file`` is given). ``fmt`` None: guessed from the suffix.
        name: the set's name; an existing name is a UserError unless ``replace``.
        judge_file: Arena format only: the line-aligned judge file.
        known_models: when given, models outside the list are problems.

    Returns:
        Summary dict (name, n_rows, models, label counts). Raises :class:`InvalidUpload` listing
        every problem, having written nothing; the database is then exactly as before.
    """
    name = _check_name(name)
    if (
        not replace and Path(db).exists() and SC.set_exists(db, name)
    ):  # fail fast, before a big file (rechecked on write)
        raise UserError(
            f"a comparison set named {name!r} already exists; choose another --name or pass --replace"
        )
    fmt = fmt or _guess_format(source if source is not None else judge_file)
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "csv":
        if judge_file is not None:
            raise UserError(
                "--judge-file is for the Arena format; a CSV carries judge labels in a judge_winner "
                "column"
            )
        if source is None:
            raise UserError("give the CSV file to import")
        df, problems = validate_comparisons_csv(source, known_models, max_bytes)
    else:
        df, problems = validate_arena(source, judge_file, known_models, max_bytes)
    if problems:
        raise InvalidUpload(problems)
    files = [s for s in (source, judge_file) if s is not None]
    labels = [_label(s) for s in files]
    meta = {
        "format": fmt,
        "files": labels,
        "sha256": [_sha256(s) for s in files],
        "judge_file": _label(judge_file) if judge_file is not None else None,
    }
    exists = store_comparison_set(db, df, name, ", ".join(labels), meta, replace=replace)
    return {
        "name": name,
        "format": fmt,
        "n_rows": int(len(df)),
        "replaced": bool(exists),
        "models": sorted(set(df.model_a) | set(df.model_b)),
        "n_human_labels": int(df.human_winner.notna().sum()),
        "n_judge_labels": int(df.judge_winner.notna().sum()),
        "n_categories": int(df["category"].nunique()) if "category" in df else 0,
    }


def store_comparison_set(
    db, df: pd.DataFrame, name: str, source: str, meta: dict, replace: bool = False
) -> bool:
    """Write normalised rows (NORMALISED_COLUMNS) as set ``name`` in ONE transaction; returns whether a
    set of that name was replaced. An existing name without ``replace`` is a UserError (nothing
    written)."""
    return SC.write_set(db, df, _check_name(name), source, meta, replace)


def _cell(x) -> str:
    """An optional column's value as CSV text: blank for None, an integer without '.0', a time in ISO
    form."""
    if x is None or (isinstance(x, float) and x != x):
        return ""
    if isinstance(x, pd.Timestamp) or hasattr(x, "isoformat"):
        return pd.Timestamp(x).isoformat(sep=" ")
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def list_comparison_sets(db) -> pd.DataFrame:
    """Every stored comparison set: name, source, created_at, n_rows, n_human, n_judge, n_models,
    meta."""
    return SC.list_sets(db)


def read_comparison_set(db, name: str) -> pd.DataFrame:
    """The rows of set ``name`` in file order (prompt_id, model_a, model_b, human_winner,
    judge_winner)."""
    return SC.read_set(db, name)


def delete_comparison_set(db, name: str) -> int:
    """Delete set ``name`` and its rows in one transaction; returns the number of rows deleted."""
    return SC.delete_set(db, name)


def export_comparison_set(db, name: str, out=None) -> str:
    """Set ``name`` as CSV in the upload format (id, prompt_id, model_a, model_b, winner, judge_winner;
    winners a/b/tie, blank = no label), then each optional column (repeat, mode, labeller, labelled_at,
    presented, category) that some row of the set has: re-importable as is, and exporting the re-imported set
    gives the same text. Writes to ``out`` if given."""
    df = read_comparison_set(db, name)
    csv_df = pd.DataFrame(
        {
            "id": range(1, len(df) + 1),
            "prompt_id": df.prompt_id,
            "model_a": df.model_a,
            "model_b": df.model_b,
            "winner": df.human_winner.fillna(""),
            "judge_winner": df.judge_winner.fillna(""),
        }
    )
    for c in OPTIONAL_COLUMNS:
        if c in df and df[c].notna().any():
            csv_df[c] = [_cell(x) for x in df[c]]
    text = csv_frame(csv_df).to_csv(index=False)  # names open as text in a spreadsheet; read back as is
    if out is not None:
        Path(out).write_text(text, encoding="utf-8")
    return text
