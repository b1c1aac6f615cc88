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


@pytest.mark.slow  # two pytest workers in a subprocess
def test_two_workers_keep_a_module_whole_and_a_serial_group_on_one_worker(tmp_path):
    """`pytest -n 2 --dist loadgroup` (scripts/test.sh) with the project's conftest: every module runs
    whole on one worker, and the modules of a serial group (browser, processes) all on the same one.
    (xdist's own loadgroup marks a group by rewriting ``item._nodeid``, which pytest 9 ignores: this
    fails if the project relied on it.) The serial groups, the longest units, start first, although
    xdist by default starts the modules with the most tests first."""
    from tests.conftest import SERIAL_GROUPS, xdist_group

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    heavy = [*sorted(SERIAL_GROUPS["browser"])[:2], *sorted(SERIAL_GROUPS["processes"])[:2]]
    names = ["test_one.py", "test_two.py", "test_three.py", *heavy]  # the heavy ones last on disk
    for name in names:  # and with fewer tests: xdist's own order (most tests first) would run them last
        n = 2 if name in heavy else 6
        (tests / name).write_text("".join(f"def test_{i}():\n    pass\n\n\n" for i in range(n)))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    worker_of: dict[str, set[str]] = {}
    first_of: dict[str, str] = {}  # each worker's first module
    for line in r.stdout.splitlines():
        if " PASSED tests/" in line:
            worker = line.split("]", 1)[0].lstrip("[")
            module = line.split(" PASSED tests/", 1)[1].split("::", 1)[0]
            worker_of.setdefault(module, set()).add(worker)
            first_of.setdefault(worker, module)
    assert set(worker_of) == set(names), worker_of
    assert all(len(w) == 1 for w in worker_of.values()), worker_of  # each module whole
    for group in ("browser", "processes"):
        workers = set().union(*(worker_of[m] for m in names if m in SERIAL_GROUPS[group]))
        assert len(workers) == 1, (group, worker_of)  # a serial group on one worker
    # the serial groups (conftest.HEAVY_FIRST) start first, one on each worker
    assert {xdist_group(m) for m in first_of.values()} == {"browser", "processes"}, first_of
