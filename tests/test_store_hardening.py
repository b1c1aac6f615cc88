"""The store side of file hardening: a garbage .wal next to a good database is moved aside with one line
(never overwritten), `comparisons list` on a missing database fails with one line, a refused run
leaves no run-lock file, and a driver that waited on a removed lock file takes the live one."""

from __future__ import annotations

import os

import pytest

from engine import store
from engine.cli import main
from engine.errors import UserError
from engine.store import db as dbmod
from engine.store import files, runlock


def test_garbage_wal_is_moved_aside_with_one_line_and_nothing_is_lost(tmp_db, capsys):
    with store.transaction(tmp_db) as con:
        con.execute("INSERT INTO meta VALUES ('k', 'v')")
    wal = tmp_db.with_name(tmp_db.name + ".wal")
    junk = os.urandom(5000).replace(b"d", b"e")  # never starts like a DuckDB WAL
    wal.write_bytes(junk)
    with store.transaction(tmp_db) as con:
        con.execute("INSERT INTO meta VALUES ('k2', 'v2')")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"warning: {wal} is not a DuckDB write-ahead log (5,000 bytes"
    )
    aside = list(tmp_db.parent.glob(tmp_db.name + ".wal.unreadable-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == junk  # kept, byte for byte
    with store.reader(tmp_db) as con:
        assert dict(con.execute("SELECT key, value FROM meta WHERE key LIKE 'k%'").fetchall()) == {
            "k": "v",
            "k2": "v2",
        }


def test_a_duckdb_wal_is_recognised_and_left_alone(tmp_db, capsys):
    import duckdb

    with store.writer(tmp_db):
        pass
    con = duckdb.connect(str(tmp_db))
    con.execute("SET checkpoint_threshold = '1GB'")
    con.execute("INSERT INTO meta VALUES ('pending', 'yes')")
    wal = tmp_db.with_name(tmp_db.name + ".wal")
    copy = wal.read_bytes()
    assert copy[:3] == files._WAL_MAGIC  # what this DuckDB writes first
    assert dbmod.set_aside_foreign_wal(tmp_db) is None  # while the writer holds it
    con.close()
    assert capsys.readouterr().err == ""


def test_comparisons_list_on_a_missing_database_fails_with_one_line(tmp_path, capsys):
    db = tmp_path / "nope.duckdb"
    assert main(["comparisons", "list", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: database not found: {db}")
    assert not db.exists()


def test_a_refused_run_leaves_no_lock_file(tmp_path):
    """What generate does with a Ray executor whose prepare() refuses (not reachable, too few
    resources): the lock is taken, then the refusal ends the block; nothing is left behind."""
    db = tmp_path / "x.duckdb"
    with pytest.raises(UserError, match="refused"):
        with runlock.RunLock(db, "run-r"):
            raise UserError("refused: no Ray cluster")
    assert not runlock.lock_path(db, "run-r").exists()
    assert not runlock.lock_path(db, "run-r").parent.exists()
    # a lock file that was there before (another run's folder) is left, emptied
    with runlock.RunLock(db, "run-a"):
        with runlock.RunLock(db, "run-b"):
            pass
        assert not runlock.lock_path(db, "run-b").exists() and runlock.lock_path(db, "run-a").exists()


def test_a_waiter_never_keeps_a_removed_lock_file(tmp_path):
    db = tmp_path / "x.duckdb"
    holder = runlock.RunLock(db, "run-w").__enter__()
    stale_fd = os.open(
        runlock.lock_path(db, "run-w"), os.O_RDWR
    )  # opened while held, as a waiting driver does
    holder.__exit__(None, None, None)  # removes the file it created
    waiter = runlock.RunLock(db, "run-w")
    waiter.path.parent.mkdir(exist_ok=True)
    import fcntl

    fcntl.flock(stale_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old inode locks fine...
    assert not waiter._same_file(stale_fd)  # ...but is not the live file: the driver retries
    os.close(stale_fd)
    with waiter:
        assert waiter._same_file(waiter.fd) and runlock.read_lock(db, "run-w")["pid"] == os.getpid()


def test_a_refused_distributed_run_leaves_nothing(tmp_path):
    """run_generation with an executor whose prepare() refuses (as RayExecutor does when Ray is not
    reachable or has too few resources): one UserError, no database, no run-lock folder."""
    from tests.test_resume import _run

    class Refusing:
        def prepare(self, models, backend, tensor_parallel):
            raise UserError("Ray cluster not reachable (refused for the test)")

        def __call__(self, tasks, spec):  # pragma: no cover - never reached
            raise AssertionError("a refused run must not generate")

    db = tmp_path / "r.duckdb"
    with pytest.raises(UserError, match="not reachable"):
        _run(db, executor=Refusing())
    assert sorted(p.name for p in tmp_path.iterdir()) == []


SETTINGS = r"""
import json, sys
import duckdb
from engine import store
q = "SELECT current_setting('enable_progress_bar')"
with store.transaction(sys.argv[1]) as con:
    writer = con.execute(q).fetchone()[0]
with store.reader(sys.argv[1]) as con:
    reader = con.execute(q).fetchone()[0]
with duckdb.connect(":memory:") as con:
    raw = con.execute(q).fetchone()[0]
print(json.dumps({"writer": writer, "reader": reader, "duckdb's default": raw}))
"""


def test_no_connection_of_the_store_draws_a_progress_bar(tmp_db):
    """DuckDB draws a progress bar on stdout for any query slower than 2 s, by default when stdout is
    a pipe (a child process: checked here, since pytest's capture turns it off): under load that
    broke a JSON line of tests/test_store_concurrency.py's reader processes (` 66% ▕███ ▏ (~6
    seconds remaining) {"loops": 71, ...}`) and would break `--json` output. Every connection the
    store opens, reader or writer, turns it off."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run(
        [sys.executable, "-c", SETTINGS, str(tmp_db)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == {"writer": False, "reader": False, "duckdb's default": True}
