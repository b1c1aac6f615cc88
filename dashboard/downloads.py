"""Figure and table export: file names, the chart toolbar's image button, HTML and CSV bytes.

Every download is named by :func:`export_name`: what it shows, then the run (or comparison set), the
model(s) and the date, e.g. ``benchmark_covariance_kde_run-ab12_smollm2-135m_vs_int8_2026-11-24.png``.
Pages pass an :class:`ExportContext` built from their widgets.

PNG / SVG come from Plotly's own camera button in the chart toolbar (:func:`modebar_config`: the
browser renders the image, about 0.2 s). :func:`figure_bytes` with ``png`` / ``svg`` (kaleido 1.x
driving a Chrome/Chromium found by choreographer: ``BROWSER_PATH`` first, then ``PATH``) starts a
headless browser per call (5-13 s): it is kept for scripts and the CLI, not used by the dashboard.
HTML export needs no browser.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go

from engine.config import FIGURE_FORMATS
from engine.csvsafe import csv_frame
from engine.errors import UserError

FORMATS = FIGURE_FORMATS
MIME = {"png": "image/png", "svg": "image/svg+xml", "html": "text/html", "csv": "text/csv"}
_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


@lru_cache(maxsize=1)
def static_export_status() -> tuple[bool, str]:
    """(available, reason): whether PNG/SVG export can run here, and why not if it cannot."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False, "PNG/SVG export needs the kaleido package (pip install kaleido); HTML export works"
    path = os.environ.get("BROWSER_PATH")
    if path and not os.path.exists(path):
        return False, f"BROWSER_PATH={path} does not exist; PNG/SVG export needs Chrome/Chromium"
    if not path:
        found = (
            next((c for c in _CANDIDATES if os.path.exists(c)), None)
            or shutil.which("chromium")
            or shutil.which("google-chrome")
            or shutil.which("chrome")
        )
        if not found:
            return False, (
                "no Chrome/Chromium found (set BROWSER_PATH or install chromium); "
                "PNG/SVG export is unavailable, HTML export works"
            )
        os.environ["BROWSER_PATH"] = found  # how kaleido's choreographer locates the browser
    return True, f"static export via kaleido and {os.environ['BROWSER_PATH']}"


def figure_bytes(
    fig: go.Figure, fmt: str, width: int | None = None, height: int | None = None, scale: float = 2.0
) -> bytes:
    """The figure as ``fmt`` ('png', 'svg' or 'html') bytes.

    HTML embeds plotly.js (works offline, interactive). PNG/SVG need kaleido and a browser
    (:func:`static_export_status`); raises UserError saying what is missing otherwise.
    """
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "html":
        return fig.to_html(include_plotlyjs=True, full_html=True).encode("utf-8")
    ok, why = static_export_status()
    if not ok:
        raise UserError(why)
    import plotly.io as pio

    w = width or fig.layout.width or 1000
    h = height or fig.layout.height or 500
    return pio.to_image(fig, format=fmt, width=int(w), height=int(h), scale=scale if fmt == "png" else 1)


CSV_FLOAT_FORMAT = "%.10g"  # 10 significant digits: 0.16999999999999998 -> 0.17, 1234567.891 stays


def table_csv(df: pd.DataFrame) -> bytes:
    """A table as UTF-8 CSV bytes without float noise: floats at 10 significant digits
    (:data:`CSV_FLOAT_FORMAT`, far beyond any interval shown), lists/arrays as their text, and no text
    cell that a spreadsheet would run as a formula (:func:`engine.csvsafe.csv_frame`)."""
    return csv_frame(df).to_csv(index=False, float_format=CSV_FLOAT_FORMAT).encode("utf-8")


# --------------------------------------------------------------------------- file names


@dataclass(frozen=True)
class ExportContext:
    """What a page's downloads are about, from its widgets: the page key, the run or the
    comparison set, and the models shown (in the page's order)."""

    page: str
    run: str | None = None
    set_name: str | None = None
    models: tuple[str, ...] = ()


def _slug(s: object, n: int = 40, keep: str = "") -> str:
    """Letters, digits, '.', '-' (and ``keep``); anything else -> '-' ('_' separates the name's
    parts)."""
    return re.sub(rf"[^A-Za-z0-9.{keep}-]+", "-", str(s)).strip("-._")[:n].strip("-._")


def short_models(models: Sequence[str], max_models: int = 3) -> str:
    """``a_vs_b``: the first model in full, the others without the prefix they share with it
    (``smollm2-135m``, ``smollm2-135m-int8`` -> ``smollm2-135m_vs_int8``); more than
    ``max_models`` -> the first ones and ``+N``."""
    names = [_slug(m) for m in models if m]
    if not names:
        return ""
    first, out = names[0], [names[0]]
    for m in names[1:max_models]:
        k = len(os.path.commonprefix([first, m]))
        rest = m[k:].lstrip("-.")
        out.append(rest if rest and k >= 3 else m)
    tail = f"_+{len(names) - max_models}" if len(names) > max_models else ""
    return "_vs_".join(out) + tail


def export_name(
    what: str, ext: str, ctx: ExportContext | None = None, date: _dt.date | None = None
) -> str:
    """The file name of one download: ``<page>_<what>_<run-id | set-name>_<models>_<YYYY-MM-DD>.<ext>``
    (parts that are empty are left out; ``ext`` without its dot, or "" for a stem)."""
    date = date or _dt.date.today()
    parts = []
    if ctx is not None:
        parts.append(_slug(ctx.page))
    parts.append(_slug(what, 60, keep="_") or "export")
    if ctx is not None:
        if ctx.run:
            parts.append(
                ctx.run
                if str(ctx.run).startswith("run-") and _slug(ctx.run) == ctx.run
                else f"run-{_slug(ctx.run, 24)}"
            )
        if ctx.set_name:
            parts.append(f"set-{_slug(ctx.set_name, 24)}")
        parts.append(short_models(ctx.models))
    parts.append(date.isoformat())
    stem = "_".join(p for p in parts if p)
    return f"{stem}.{ext}" if ext else stem


def modebar_config(filename: str, fmt: str = "png", scale: float = 2.0) -> dict:
    """``st.plotly_chart`` config: the toolbar's camera button saves ``filename.<fmt>`` (PNG at
    ``scale`` x the shown size, or SVG), rendered by the browser (fast); no Plotly logo."""
    if fmt not in ("png", "svg"):
        raise UserError(f"unknown image format {fmt!r}; allowed: png, svg")
    return {
        "displaylogo": False,
        "toImageButtonOptions": {
            "format": fmt,
            "filename": filename,
            "scale": scale if fmt == "png" else 1,
        },
    }


def report_name(run: str, models: Sequence[str] = (), date: _dt.date | None = None) -> str:
    """The "Download report" file name: ``report_run-<run>_<models>_<date>.html``, like the chart
    downloads."""
    return export_name("report", "html", ExportContext("", run=run, models=tuple(models)), date)
