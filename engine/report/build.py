"""Build a report: a scored run's (:func:`run_report`) or a comparison set's (:func:`set_report`), and
the file name that says what it is (:func:`report_file_name`)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import engine
from engine.report.model import Report


def made_by() -> str:
    """The code and machine that made a report: engine version, git commit when known, host, date."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return (
        f"Coupled Eval {engine.__version__}"
        + (f" (git {rev})" if rev else "")
        + f" on {platform.node() or 'unknown host'} ({platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}), {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}"
    )


def run_report(
    db: str | os.PathLike,
    run: str,
    models: Sequence[str] | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    db_label: str | None = None,
) -> Report:
    """The report of one scored run: headline, design, every analysis the run supports, methods,
    commands.

    Raises:
        UserError: an unknown run, or a run without scores (one line naming what is missing).
    """
    from engine.report.context import RunContext
    from engine.report.run_sections import run_sections

    t0 = time.perf_counter()
    ctx = RunContext(db, run, list(models) if models else None, alpha, seed, db_label)
    s = ctx.summary  # the one-line UserError of an unscored or unknown run comes from here
    sections = run_sections(ctx)
    sub = (
        f"{', '.join(ctx.models)} · dataset {s.dataset_id} · {s.n_questions:,} questions × "
        f"{s.n_repeats} repeats · {', '.join(s.modes)} · rule {s.rule}"
    )
    return Report(
        f"Evaluation report: run {run}",
        sub,
        sections,
        made_by(),
        time.perf_counter() - t0,
        tuple(ctx.models),
    )


def set_report(
    db: str | os.PathLike,
    name: str,
    label: str | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    models: Sequence[str] | None = None,
    db_label: str | None = None,
) -> Report:
    """The report of a stored comparison set (uploads, Arena): win-rates, Bradley-Terry, rank-sets."""
    from engine.report.set_sections import SetContext, set_sections

    t0 = time.perf_counter()
    ctx = SetContext(db, name, label, alpha, seed, list(models) if models else None, db_label)
    sections = set_sections(ctx)
    sub = f"{len(ctx.models)} models · {ctx.n_rows:,} comparisons · {ctx.label} labels"
    return Report(
        f"Evaluation report: comparison set {name}",
        sub,
        sections,
        made_by(),
        time.perf_counter() - t0,
        tuple(ctx.models),
    )


def _slug(s: object, n: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(s)).strip("-._")[:n].strip("-._")


def report_file_name(
    run: str | None = None,
    set_name: str | None = None,
    models: Sequence[str] = (),
    ext: str = "html",
    date: _dt.date | None = None,
) -> str:
    """``report_run-<run>_<models>_<YYYY-MM-DD>.<ext>`` (or ``set-<name>``): what it is, like the chart
    downloads (``dashboard.downloads.export_name``); more than three models: the first three and
    ``+N``."""
    parts = ["report"]
    if run:
        parts.append(f"run-{_slug(run, 24)}")
    if set_name:
        parts.append(f"set-{_slug(set_name, 24)}")
    names = [_slug(m) for m in models if m]
    if names:
        parts.append("_vs_".join(names[:3]) + (f"_+{len(names) - 3}" if len(names) > 3 else ""))
    parts.append((date or _dt.date.today()).isoformat())
    return "_".join(p for p in parts if p) + f".{ext}"


def run_report_html(db: str | os.PathLike, run: str, models: tuple[str, ...] = ()) -> bytes:
    """The HTML report of ``run`` as bytes (the dashboard's "Download report"; models: the headline pair
    first)."""
    from engine.report.render_html import report_html

    return report_html(run_report(db, run, models=list(models) or None)).encode("utf-8")
