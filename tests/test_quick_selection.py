"""`pytest --quick` (scripts/test.sh --quick): the marked slow tests and the model-loading modules
are deselected, everything else is kept; without the option nothing is left out."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import QUICK_SKIP_MODULES, ROOT


def _collected(*args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {line for line in r.stdout.splitlines() if "::" in line}


@pytest.mark.slow  # collects the suite twice in subprocesses
def test_quick_leaves_out_slow_tests_and_heavy_modules_only():
    files = ["tests/test_store_concurrency.py", "tests/test_layout.py", "tests/test_packaging.py"]
    assert "test_packaging.py" in QUICK_SKIP_MODULES
    full, quick = _collected(*files), _collected("--quick", *files)
    assert quick < full
    slow = (
        "tests/test_store_concurrency.py::test_writer_gets_in_while_readers_hold_the_file_continuously"
    )
    assert slow in full and slow not in quick
    assert not any(t.startswith("tests/test_packaging.py") for t in quick)
    assert any(t.startswith("tests/test_packaging.py") for t in full)
    kept = {t for t in full if t.startswith("tests/test_layout.py")}
    assert kept and kept <= quick  # unmarked tests of light modules stay
