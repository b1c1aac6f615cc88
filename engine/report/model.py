"""The parts of a report: a :class:`Section` per analysis (text, figures with the numbers behind them,
tables, its methods paragraph and references), in the order a reader needs them (:class:`Report`).

A section is built by one function from an analysis result (``engine.report.run_sections`` and
``engine.report.set_sections``); rendering (HTML, Markdown, LaTeX, CSV) reads these objects only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import plotly.graph_objects as go


@dataclass(frozen=True)
class Cell:
    """One table cell: the text shown, and optionally the raw value and a stable key (``data-key`` /
    ``data-value`` in the HTML, so a test or a script can read the number behind the text)."""

    text: str
    value: float | None = None
    key: str | None = None


@dataclass(frozen=True)
class Table:
    caption: str
    columns: list[str]
    rows: list[list[Cell]]
    footnote: str | None = None


@dataclass(frozen=True)
class Figure:
    """An interactive figure and the table of the numbers it draws (what a reader without JavaScript,
    or a paper, gets)."""

    key: str
    fig: go.Figure
    table: Table | None = None


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    paragraphs: list[str] = field(default_factory=list)  # plain text (escaped when rendered)
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    methods: str = ""
    references: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)  # commands, shown verbatim


@dataclass(frozen=True)
class Report:
    title: str
    subtitle: str
    sections: list[Section]
    made_by: str  # engine version, commit, machine, date of the report itself
    seconds: float = 0.0
    models: tuple[str, ...] = ()  # the models it features (its file name names them)

    def section(self, key: str) -> Section | None:
        return next((s for s in self.sections if s.key == key), None)

    @property
    def n_figures(self) -> int:
        return sum(len(s.figures) for s in self.sections)


# ---------------------------------------------------------------- what a shared file may name

_PATH = re.compile(r"^(/|~|\.{1,2}/|[A-Za-z]:[\\/])")


def no_path(text: object) -> str:
    """``text`` as a shared report shows it: a filesystem path (absolute, ``~``, ``./``, ``../`` or a
    drive) reduced to its last component, so a report never names a folder of the machine that made it
    (a model's weights in a ``.venv``, the database, a dataset file); ``--opt=PATH`` keeps its option.
    Anything else (a hub id ``org/name``, a registry name) is unchanged."""
    s = str(text)
    opt, eq, value = s.partition("=")
    if eq and opt.startswith("-") and _PATH.match(value):
        return f"{opt}={no_path(value)}"
    if not _PATH.match(s):
        return s
    return PurePath(s.replace("\\", "/").rstrip("/")).name or s


# ---------------------------------------------------------------- number formatting (one place)


def num(x: Any, digits: int = 3) -> str:
    """A number as text ('-' for None / NaN)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{float(x):.{digits}f}"


def with_ci(v: Any, lo: Any, hi: Any, digits: int = 3, signed: bool = False) -> str:
    """``0.612 [0.598, 0.627]`` (``+`` signs with ``signed``)."""
    if v is None:
        return "-"
    f = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    ci = "" if lo is None or hi is None else f" [{f.format(lo)}, {f.format(hi)}]"
    return f.format(v) + ci


def pct(x: Any, digits: int = 1) -> str:
    return (
        "-"
        if x is None or (isinstance(x, float) and not math.isfinite(x))
        else f"{100 * float(x):.{digits}f}%"
    )


def cell(text: str, value: Any = None, key: str | None = None) -> Cell:
    v = (
        None
        if value is None or (isinstance(value, float) and not math.isfinite(value))
        else float(value)
    )
    return Cell(str(text), v, key)


def text_row(*texts: Any) -> list[Cell]:
    return [Cell(str(t)) for t in texts]
