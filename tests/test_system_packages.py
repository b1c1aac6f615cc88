"""tests/system_packages.py: a test that needs Chromium or pdflatex waits for scripts/test.sh's apt job
to be done with it (its file in SYSTEM_PACKAGES_READY), and nothing waits without that variable.
Waiting is counted in sleeps (no timing threshold)."""

from __future__ import annotations

import threading
import time

import pytest

from tests import system_packages as sp


@pytest.fixture
def sleeps(monkeypatch):
    calls = []
    real = time.sleep

    def sleep(s):
        calls.append(s)
        real(s)

    monkeypatch.setattr(sp.time, "sleep", sleep)
    return calls


def test_waits_for_the_packages_file_and_only_for_it(tmp_path, monkeypatch, sleeps):
    monkeypatch.setenv("SYSTEM_PACKAGES_READY", str(tmp_path))
    (tmp_path / "pdflatex").touch()  # apt is done with the other package: no help
    timer = threading.Timer(1.2, (tmp_path / "chromium").touch)
    timer.start()
    sp.wait_for("chromium", timeout_s=60)
    assert (tmp_path / "chromium").exists() and len(sleeps) >= 2  # it waited for the file
    del sleeps[:]
    sp.wait_for("pdflatex", timeout_s=60)  # already there: no wait
    assert sleeps == []


def test_gives_up_at_the_timeout_and_without_the_variable_never_waits(tmp_path, monkeypatch, sleeps):
    monkeypatch.setenv("SYSTEM_PACKAGES_READY", str(tmp_path))
    t0 = time.monotonic()
    sp.wait_for("chromium", timeout_s=1.0)
    assert time.monotonic() - t0 >= 1.0 and sleeps and not (tmp_path / "chromium").exists()
    del sleeps[:]
    monkeypatch.delenv("SYSTEM_PACKAGES_READY")
    sp.wait_for("chromium", timeout_s=60)
    assert sleeps == []
