"""Figure and table export: a Plotly figure -> PNG / SVG / interactive HTML bytes; a table -> CSV.

Static images go through kaleido 1.x, which drives a Chrome/Chromium found by choreographer
(``BROWSER_PATH`` first, then ``PATH``). When none is found, :func:`static_export_status` says why
and HTML export still works (it needs no browser). Each static export starts a headless browser
(seconds), so callers produce static images only on request.
"""

from __future__ import annotations

import os
import shutil
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go

from engine.config import FIGURE_FORMATS
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
        found = next((c for c in _CANDIDATES if os.path.exists(c)), None) or \
            shutil.which("chromium") or shutil.which("google-chrome") or shutil.which("chrome")
        if not found:
            return False, ("no Chrome/Chromium found (set BROWSER_PATH or install chromium); "
                           "PNG/SVG export is unavailable, HTML export works")
        os.environ["BROWSER_PATH"] = found  # how kaleido's choreographer locates the browser
    return True, f"static export via kaleido and {os.environ['BROWSER_PATH']}"


def figure_bytes(fig: go.Figure, fmt: str, width: int | None = None, height: int | None = None,
                 scale: float = 2.0) -> bytes:
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


def table_csv(df: pd.DataFrame) -> bytes:
    """A table as UTF-8 CSV bytes (lists/arrays rendered as their text)."""
    return df.to_csv(index=False).encode("utf-8")
