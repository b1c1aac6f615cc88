"""CSV cells that open safely in a spreadsheet (a leaf module: standard library only, so every layer
may import it; tests/test_layout.py). Every CSV the product writes (paper tables, dashboard downloads,
comparison-set and label-sample exports, exported generations) passes its text cells through
:func:`csv_cell`; readers of files the product wrote pass them back through :func:`csv_read_cell`.

A cell whose text starts with ``=``, ``+``, ``-``, ``@`` (or a tab / carriage return) is read by
Excel, LibreOffice and Google Sheets as a formula, so a model named ``=HYPERLINK("http://x")`` would run
when a colleague opens the export (CSV injection, OWASP). Such a cell is written with a leading ``'``,
which spreadsheets show as text and do not display; a plain number (``-0.25``, ``+1e-3``) is left as
it is. The rule is reversible: :func:`csv_read_cell` drops exactly the ``'`` it added, so an export
read back gives the names it was written from.
"""

from __future__ import annotations

import re
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# a plain number, or a lone "-" / "+" (the tables' mark for a missing value): no formula
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]")


def _formula(text: str) -> bool:
    """Would a spreadsheet read ``text`` as a formula: it starts like one and is not a plain number."""
    return text[:1] in FORMULA_STARTS and not _NUMBER.fullmatch(text)


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell that cannot run as a formula: text starting with ``= + - @`` (tab, CR)
    gets a leading ``'`` unless it is a plain number, and so does text whose leading ``'`` already
    precede such a start (so :func:`csv_read_cell` can undo exactly what was added); anything else,
    and every non-string, is returned unchanged."""
    if isinstance(value, str) and _formula(value.lstrip("'")):
        return "'" + value
    return value


def csv_read_cell(value: Any) -> Any:
    """The inverse of :func:`csv_cell` on a cell read back: the one ``'`` it added dropped; anything
    else unchanged."""
    if isinstance(value, str) and value.startswith("'") and _formula(value.lstrip("'")):
        return value[1:]
    return value


def csv_frame(df: Any) -> Any:
    """A copy of a pandas DataFrame whose text cells and column names went through :func:`csv_cell`
    (numbers, dates and missing values untouched)."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype.kind not in "biufcmM":  # text and object columns
            out[c] = out[c].map(csv_cell)
    out.columns = [csv_cell(c) for c in out.columns]
    return out
