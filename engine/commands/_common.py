"""Helpers shared by the command modules: the --db argument, JSON output, small argument parsers."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from engine.config import DEFAULT_DB
from engine.errors import UserError


def add_db(p, help: str | None = "database file (default: %(default)s)") -> None:
    p.add_argument("--db", default=str(DEFAULT_DB), help=help)


def _json_default(o):
    import numpy as np
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o):
    """NaN/inf -> null so the output is strict JSON."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def print_analysis(obj) -> int:
    """An analysis result as strict JSON (NaN -> null, numpy -> Python), indent 1."""
    try:
        print(json.dumps(_clean(obj), default=_json_default, indent=1))
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader has gone, nothing to report
        sys.stdout = None
    return 0


def print_json(obj) -> int:
    """A task summary as JSON, indent 2 (values JSON does not know are printed with str)."""
    print(json.dumps(obj, indent=2, default=str))
    return 0


def csv_list(s: str | None) -> list[str] | None:
    """'a, b,c' -> ['a', 'b', 'c']; None stays None; an empty list is a UserError."""
    if s is None:
        return None
    items = [x.strip() for x in s.split(",") if x.strip()]
    if not items:
        raise UserError(f"empty list {s!r}")
    return items


def read_text_file(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} not found: {p}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {p} is not UTF-8 text") from None
