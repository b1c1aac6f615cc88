"""Debian's packages that scripts/test.sh installs while the suite already runs: Chromium (the
browser tests, the report's figures drawn offline, kaleido's PNGs) and pdflatex (the report's LaTeX
tables). test.sh starts the main suite as soon as .venv is whole, before apt has finished, and sets
SYSTEM_PACKAGES_READY to a folder where apt's background job leaves a file per package once it is
done with it (installed or not). A test that needs one waits for its file first, so a slow apt makes
it wait, never skip; without SYSTEM_PACKAGES_READY (a plain pytest run) nothing waits.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
# the flags every test and bench launches it with (headless, as root in CI, no GPU, no update pings)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
WAIT_S = 900  # apt's install of both (chromium ~100 MB, texlive ~144 MB) takes a minute or two


def wait_for(package: str, timeout_s: float = WAIT_S) -> None:
    """Wait until scripts/test.sh's apt job is done with ``package`` ('chromium' | 'pdflatex')."""
    folder = os.environ.get("SYSTEM_PACKAGES_READY")
    if not folder:
        return
    deadline = time.monotonic() + timeout_s
    while not (Path(folder) / package).exists() and time.monotonic() < deadline:
        time.sleep(0.5)


def chromium_or_skip() -> str:
    """Debian's Chromium's path, after apt is done with it; skip the test when it is not installed."""
    wait_for("chromium")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}, which is not installed")
    return CHROMIUM


def pdflatex() -> str | None:
    """pdflatex's path, after apt is done with it (None: not installed)."""
    wait_for("pdflatex")
    return shutil.which("pdflatex")
