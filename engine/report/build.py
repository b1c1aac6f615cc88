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


def made_by(include_host: bool = False) -> str:
    """The code that made a report: engine version, git commit when known, system, Python, date; the
    host name only with ``include_host`` (a shared file names no machine unless its author asks)."""
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
        + (f" on {platform.node() or 'unknown host'}" if include_host else "")
        + f" ({platform.system()} {platform.machine()}, Python {platform.python_version()}), "
        f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}"
    )


def run_report(
    db: str | os.PathLike,
    run: str,
    models: Sequence[str] | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    db_label: str | None = None,
    include_host: bool = False,
    gate_margin: float | None = None,
) -> Report:
    """The report of one scored run: headline, design, every analysis the run supports, methods,
    commands. ``db_label``: the database as the commands name it (its file name only; default the
    file name of ``db``); ``include_host``: name the machines (the run's and the report's);
    ``gate_margin``: add the release gate of the headline pair (B = the second model against A = the
    first) at this margin (``engine.report.run_gate``).

    Raises:
        UserError: an unknown run, or a run with neither scores nor judge verdicts (one line naming
            what is missing). A judged run without scores is reported from its verdicts and labels.
    """
    from engine.report.context import RunContext
    from engine.report.run_sections import run_sections

    t0 = time.perf_counter()
    ctx = RunContext(
        db, run, list(models) if models else None, alpha, seed, db_label, include_host, gate_margin
    )
    # the one-line UserError of an unknown run, or of an unscored run without verdicts, comes from here
    if ctx.scored:
        s = ctx.summary
        sub = (
            f"{', '.join(ctx.models)} · dataset {s.dataset_id} · {s.n_questions:,} questions × "
            f"{s.n_repeats} repeats · {', '.join(s.modes)} · rule {s.rule}"
        )
    else:
        ds = ctx.design.dataset
        sub = (
            f"{', '.join(ctx.models)} · dataset {ds.dataset_id if ds else '-'} · judged by "
            f"{', '.join(ctx.judges)} · {ctx.label_count:,} human labels"
        )
    sections = run_sections(ctx)
    return Report(
        f"Evaluation report: run {run}",
        sub,
        sections,
        made_by(include_host),
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
    include_host: bool = False,
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
        made_by(include_host),
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
    first): no host name and no path, like every report made without ``--include-host``."""
    from engine.report.render_html import report_html

    return report_html(run_report(db, run, models=list(models) or None)).encode("utf-8")
