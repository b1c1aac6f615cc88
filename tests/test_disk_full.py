"""A full disk: the error says so, the file with its pending WAL is recognised as a
database (not "truncated"), `db check` and `export` read it, and after space is freed the same run
resumes with nothing lost or duplicated.

The disk is a real 4 MiB tmpfs when this process may mount one (root with CAP_SYS_ADMIN);
otherwise the child runs under RLIMIT_FSIZE = 64 KiB (``prlimit --fsize``): every file it writes
stops there with EFBIG ("File too large"), the database's first checkpoint fails part-way and the
WAL then fills, which is the same sequence a full disk gives (checked by hand: the WAL commit fails,
the file is the headers with a pending WAL). Never a skip. COUPLED_EVAL_TEST_NO_MOUNT=1 forces the
second variant (to check it on a machine that can mount)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from engine import store
from engine.cli import main
from engine.store import db as dbmod
from tests.test_resume import _assert_same, _rows, _run

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 64 * 1024

_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from engine.errors import UserError
    from tests.test_resume import _run
    try:
        print(_run({db!r}))
    except UserError as exc:  # what engine.cli prints for a UserError
        print(f"error: {{exc}}", file=sys.stderr)
        sys.exit(2)
""")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    db = tmp_path_factory.mktemp("ref") / "ref.duckdb"
    return _run(db), _rows(db)


def _mount_small(d: Path, size: str) -> bool:
    if os.environ.get("COUPLED_EVAL_TEST_NO_MOUNT"):
        return False
    opts = f"size={size}" if not d.is_mount() else f"remount,size={size}"
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)], capture_output=True, text=True
    )
    return r.returncode == 0


def _child(db: Path, fsize: int | None) -> subprocess.CompletedProcess:
    def limit():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT), db=str(db))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=limit,
    )


@pytest.mark.slow
def test_full_disk_says_so_and_the_same_run_resumes_after_space_is_freed(tmp_path, reference, capsys):
    fs = tmp_path / "small"
    fs.mkdir()
    mounted = _mount_small(fs, "4m")
    db = fs / "run.duckdb"
    try:
        first = _child(db, None if mounted else LIMIT)
        assert first.returncode == 2, first.stderr[-3000:]
        err = first.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: the disk is full: database"), first.stderr[
            -3000:
        ]
        assert "rerun the same command" in err[0]
        assert "Traceback" not in first.stderr
        # the file and its WAL: a database with a pending WAL, not a truncated file
        assert dbmod.file_problem(db) is None
        dbmod.check_file(db)
        assert dbmod.pending_wal(db) is not None
        stored = store.table_counts(db)["generations"]
        assert 0 < stored < 32, stored  # the run stopped part-way, with what it stored kept
        assert store.query_df(db, "SELECT status FROM runs").iloc[0, 0] in ("failed", "running")
        capsys.readouterr()
        assert main(["db", "check", "--db", str(db)]) == 0
        assert "pending WAL" in capsys.readouterr().out
        out = tmp_path / "before.csv"
        assert main(["export", "generations", "--db", str(db), "--out", str(out)]) == 0
        assert len(pd.read_csv(out)) == stored
        # space freed: the same command resumes the run; the rows are exactly the uninterrupted run's
        if mounted:
            assert _mount_small(fs, "64m")
        second = _child(db, None)
        assert second.returncode == 0, second.stderr[-3000:]
        assert second.stdout.strip() == reference[0]
        _assert_same(db, reference)
        assert dbmod.pending_wal(db) is None
        assert main(["db", "check", "--db", str(db)]) == 0
        out = tmp_path / "after.csv"
        assert main(["export", "generations", "--db", str(db), "--out", str(out)]) == 0
        assert len(pd.read_csv(out)) == 32
    finally:
        if fs.is_mount():
            subprocess.run(["umount", str(fs)], check=False)


def test_a_torn_tail_beyond_the_live_blocks_is_not_truncation(tmp_db):
    """The file check alone: bytes past the blocks the live header counts (a checkpoint that failed
    part-way) are accepted; a file shorter than those blocks and not whole blocks is truncated."""
    with store.transaction(tmp_db) as con:
        con.execute("INSERT INTO meta VALUES ('k', 'v')")
    data = tmp_db.read_bytes()
    tmp_db.write_bytes(data + b"\0" * 1000)  # a torn extension
    assert dbmod.file_problem(tmp_db) is None
    with store.reader(tmp_db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'k'").fetchone()[0] == "v"
    tmp_db.write_bytes(data[: len(data) - 1000])
    assert "truncated" in dbmod.file_problem(tmp_db)
