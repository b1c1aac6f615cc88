"""The database file: schema versions and migration, damaged files refused before
anything runs and never written, a failed commit keeps its cause."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from engine import store
from engine.cli import main
from engine.errors import UserError
from engine.store import db as dbmod

V1_SQL = Path(__file__).parent / "data" / "schema_v1.sql"


@pytest.fixture(autouse=True)
def _short_settling_time(monkeypatch):
    """A damaged file here stays damaged, and no other process writes it: every check settles after
    one re-read (50 ms) instead of watching the file for the default 0.3 s, which the 56 damaged-file
    cases would wait in turn (14 s idle). The settling itself, with a writer at work on the file:
    test_a_file_another_process_is_writing_is_not_called_damaged (its own settle_s)."""
    from engine.store import files

    monkeypatch.setattr(files, "SETTLE_S", 0.05)


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"


def make_v1(path: Path) -> None:
    """A database as the previous release (30e8a04, schema version 1) made it, with some data."""
    con = duckdb.connect(str(path))
    con.execute(V1_SQL.read_text())
    con.execute(
        "INSERT INTO runs (run_id, dataset_id, config, status, n_units) VALUES "
        "('r1', 'demo', '{\"models\": [\"a\", \"b\"]}', 'done', 4)"
    )
    con.execute(
        "INSERT INTO prompts (dataset_id, prompt_id, idx, gold) VALUES ('demo', 'p1', 0, 'A'), "
        "('demo', 'p2', 1, 'B')"
    )
    con.execute(
        "INSERT INTO generations (run_id, model, prompt_id, repeat, mode, seed, text, token_ids, "
        "finish_reason, n_tokens) VALUES ('r1', 'a', 'p1', 0, 'coupled', 1, 'A', [1], 'eos', 1), "
        "('r1', 'b', 'p1', 0, 'coupled', 1, 'B', [2], 'eos', 1)"
    )
    con.execute("INSERT INTO comparison_sets (name, source, n_rows) VALUES ('h', 'csv', 1)")
    con.execute("INSERT INTO comparisons VALUES ('h', 0, 'p1', 'a', 'b', 'a', NULL)")
    con.close()


# ---------------------------------------------------------------------------- schema versions


def test_fresh_file_is_created_and_current_file_untouched(tmp_db):
    with store.writer(tmp_db):
        pass
    with store.reader(tmp_db) as con:
        assert con.execute("SELECT value FROM meta").fetchone()[0] == str(store.SCHEMA_VERSION)
        cols = {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
            ).fetchall()
        }
    assert {"heartbeat_at", "pid", "host"} <= cols
    before = _digest(tmp_db)
    with store.writer(tmp_db):  # current version: init_schema writes nothing
        pass
    assert _digest(tmp_db) == before


def test_empty_duckdb_file_gets_the_schema(tmp_db):
    duckdb.connect(str(tmp_db)).close()  # a valid DuckDB file with no tables
    with store.writer(tmp_db):
        pass
    assert store.describe(tmp_db)["status"] == "current"


@pytest.mark.parametrize("kind", ["older", "newer", "foreign"])
def test_other_schemas_are_refused_and_not_written(tmp_db, kind, capsys):
    if kind == "older":
        make_v1(tmp_db)
        match = r"schema version 1 .*python -m engine db migrate --db"
    elif kind == "newer":
        with store.writer(tmp_db) as con:
            con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        match = "schema version 99, newer than"
    else:
        con = duckdb.connect(str(tmp_db))
        con.execute("CREATE TABLE orders (id INTEGER, total DOUBLE)")
        con.execute("INSERT INTO orders VALUES (1, 2.5)")
        con.close()
        match = "not a Coupled Eval one"
    dbmod._VERIFIED.clear()
    before = _digest(tmp_db)
    with pytest.raises(UserError, match=match):
        with store.transaction(tmp_db) as con:
            con.execute("INSERT INTO meta VALUES ('x', 'y')")
    with pytest.raises(UserError, match=match):
        with store.reader(tmp_db):
            pass
    assert main(["comparisons", "list", "--db", str(tmp_db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert _digest(tmp_db) == before
    assert store.describe(tmp_db)["status"] == kind


def test_migrate_from_previous_release_keeps_data_and_commands_work(tmp_path, capsys):
    db = tmp_path / "old.duckdb"
    make_v1(db)
    assert main(["db", "check", "--db", str(db)]) == 1
    assert "schema version 1" in capsys.readouterr().out
    assert main(["db", "migrate", "--db", str(db), "--json"]) == 0
    import json

    res = json.loads(capsys.readouterr().out)
    assert (res["from_version"], res["to_version"]) == (1, store.SCHEMA_VERSION)
    backup = Path(res["backup"])
    assert backup.exists() and backup.name.startswith("old.duckdb.v1-")
    bcon = duckdb.connect(str(backup), read_only=True)  # the backup is the untouched v1 file
    assert bcon.execute("SELECT value FROM meta").fetchone()[0] == "1"
    bcon.close()
    counts = store.table_counts(db)
    assert (counts["runs"], counts["generations"], counts["comparisons"], counts["prompts"]) == (
        1,
        2,
        1,
        2,
    )
    with store.reader(db) as con:
        assert con.execute("SELECT status, heartbeat_at, pid, host FROM runs").fetchone() == (
            "done",
            None,
            None,
            None,
        )
    # the commands work after the migration: a read, a write, and the version is current
    assert main(["comparisons", "list", "--db", str(db)]) == 0
    assert "h" in capsys.readouterr().out
    assert main(["export", "generations", "--db", str(db), "--out", "-"]) == 0
    assert "r1" in capsys.readouterr().out
    with store.transaction(db) as con:
        con.execute("UPDATE runs SET heartbeat_at = now(), pid = 1, host = 'h' WHERE run_id = 'r1'")
    assert main(["db", "check", "--db", str(db)]) == 0
    assert main(["db", "migrate", "--db", str(db)]) == 0  # twice: nothing to do
    assert "nothing to do" in capsys.readouterr().out


def test_migration_is_all_or_nothing(tmp_db, monkeypatch):
    make_v1(tmp_db)
    from engine.store import schema

    monkeypatch.setattr(
        dbmod, "MIGRATIONS", ((1, (*schema.MIGRATIONS[0][1], "ALTER TABLE nope ADD COLUMN x INT")),)
    )
    with pytest.raises(duckdb.Error):
        store.migrate(tmp_db)
    assert store.describe(tmp_db)["version"] == 1  # nothing of the failed migration stayed
    with duckdb.connect(str(tmp_db), read_only=True) as con:
        cols = {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
            ).fetchall()
        }
    assert "heartbeat_at" not in cols


# ---------------------------------------------------------------------------- damaged files


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    """A healthy database of several blocks (so truncations cut real data)."""
    p = tmp_path_factory.mktemp("healthy") / "good.duckdb"
    with store.transaction(p) as con:
        con.execute(
            "INSERT INTO comparisons (set_name, row_idx, prompt_id, model_a, model_b, human_winner, "
            "judge_winner) SELECT 'big', range, 'p' || range, 'a', 'b', 'a', NULL FROM range(300000)"
        )
        con.execute("INSERT INTO comparison_sets (name, source, n_rows) VALUES ('big', 'csv', 300000)")
    assert p.stat().st_size > 4 * 262144
    return p


DAMAGE = ["zero", "random", "text", "directory", "trunc4k", "third", "last_block"]


def damage(kind: str, healthy: Path, dst: Path) -> Path:
    data = healthy.read_bytes()
    if kind == "directory":
        dst.mkdir()
        return dst
    blob = {
        "zero": b"",
        "random": os.urandom(300_000),
        "text": b"prompt_id,model_a\n" * 500,
        "trunc4k": data[:4096],
        "third": data[: len(data) // 3],
        "last_block": data[: len(data) - 262144],
    }[kind]  # cut at a block boundary: DuckDB itself opens it
    dst.write_bytes(blob)
    return dst


COMMANDS = {
    "export": ["export", "generations"],
    "comparisons list": ["comparisons", "list"],
    "benchmark-compare": ["benchmark-compare", "--model-a", "a", "--model-b", "b"],
    "import": ["import", "comparisons", "{csv}", "--name", "x"],
    "score": ["score", "--run", "r1"],
    "generate": [
        "generate",
        "--models",
        "smollm2-135m",
        "--limit",
        "1",
        "--repeats",
        "1",
        "--max-new-tokens",
        "2",
    ],
    "info": ["info"],
}


@pytest.mark.parametrize("cmd", list(COMMANDS))
@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_database_is_refused_by_every_command(kind, cmd, healthy, tmp_path, capsys):
    db = damage(kind, healthy, tmp_path / "bad.duckdb")
    before = _digest(db)
    csv = tmp_path / "c.csv"
    csv.write_text("prompt_id,model_a,model_b,winner\np1,a,b,a\n")
    argv = [a.replace("{csv}", str(csv)) for a in COMMANDS[cmd]] + ["--db", str(db)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: database {db}") and ("backup" in err or "another --db" in err), err
    assert _digest(db) == before
    assert not Path(str(db) + ".wal").exists()


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_database_store_and_dashboard_reads(kind, healthy, tmp_path):
    from engine.analysis import overview

    db = damage(kind, healthy, tmp_path / "bad.duckdb")
    before = _digest(db)
    with pytest.raises(UserError, match="restore it from a backup or pass another --db"):
        overview.overview(db)  # what the dashboard's Home loader calls
    with pytest.raises(UserError, match="restore it from a backup or pass another --db"):
        with store.transaction(db) as con:
            con.execute("INSERT INTO meta VALUES ('x', 'y')")
    assert store.describe(db)["status"] == "damaged"
    assert _digest(db) == before


def test_healthy_copy_passes_and_header_check_is_exact(healthy, tmp_path):
    db = tmp_path / "copy.duckdb"
    shutil.copy(healthy, db)
    assert dbmod.file_problem(db) is None
    assert store.describe(db)["status"] == "current"
    assert store.table_counts(db)["comparisons"] == 300000


# ---------------------------------------------------------------------------- failed commits


def test_failed_commit_reraises_the_cause_not_the_rollback_error(tmp_db):
    with store.transaction(tmp_db) as con:
        con.execute("INSERT INTO meta VALUES ('k', 'v')")
    with pytest.raises(duckdb.ConstraintException):
        with store.transaction(tmp_db) as con:
            con.execute("INSERT INTO meta VALUES ('k2', 'v')")
            con.execute("INSERT INTO meta VALUES ('k', 'again')")  # aborts the transaction inside DuckDB
    with pytest.raises(RuntimeError, match="boom"):
        with store.transaction(tmp_db) as con:
            con.execute("INSERT INTO meta VALUES ('k3', 'v')")
            con.execute(
                "COMMIT"
            )  # the block's own commit will find no transaction: the cause still wins
            raise RuntimeError("boom")
    with store.reader(tmp_db) as con:
        assert {r[0] for r in con.execute("SELECT key FROM meta").fetchall()} == {
            "schema_version",
            "k",
            "k3",
        }


def test_read_only_file_says_so(tmp_db, monkeypatch):
    """As root (CI containers) chmod does not stop writes, so the OS error is simulated."""
    with store.writer(tmp_db):
        pass
    real = duckdb.connect

    def fake(path, read_only=False, **kw):
        if not read_only:
            raise duckdb.IOException(f'IO Error: Cannot open file "{path}.wal": Permission denied')
        return real(path, read_only=True, **kw)

    monkeypatch.setattr(duckdb, "connect", fake)
    with pytest.raises(
        UserError, match=r"cannot be opened for writing \(the file, its folder or its WAL .*read-only"
    ):
        with store.transaction(tmp_db):
            pass


def test_wal_permission_error_at_commit_is_one_clear_line(tmp_db):
    with pytest.raises(UserError, match="read-only") as info:
        with store.transaction(tmp_db):
            raise duckdb.IOException(f'IO Error: Cannot open file "{tmp_db}.wal": Permission denied')
    assert isinstance(
        info.value.__cause__, duckdb.IOException
    )  # the cause is kept, not the rollback's error


def test_a_file_another_process_is_writing_is_not_called_damaged(tmp_db):
    """The file check runs before DuckDB's lock, so it can catch another process mid-checkpoint (the
    file cut short of a block for a moment: a second writer beside a generation under load was told
    the database was truncated). A torn look that clears within the settling time is no problem; a
    file that stays torn is still refused."""
    import threading

    from engine.store import files

    with store.transaction(tmp_db) as con:
        con.execute("INSERT INTO meta VALUES ('k', 'v')")
    data = tmp_db.read_bytes()
    alloc = files._block_alloc(tmp_db)
    with open(tmp_db, "r+b") as f:  # the moment a writer has cut the file short of a whole block
        f.truncate(len(data) - alloc // 2)
    assert "truncated" in files._file_problem_once(tmp_db)
    writer = threading.Timer(0.1, tmp_db.write_bytes, [data])  # ... and then finishes its write
    writer.start()
    # a settling time well past the writer's 0.1 s, so that a loaded machine cannot make the test
    # race the window (the default's own value is not what is tested here; 0 fails, as before)
    assert files.file_problem(tmp_db, settle_s=5.0) is None
    writer.join()  # (file_problem saw the file change; the reader below needs the whole write)
    with store.reader(tmp_db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'k'").fetchone()[0] == "v"
    with open(tmp_db, "r+b") as f:  # torn for good (a truncated copy): refused, one line
        f.truncate(len(data) - alloc // 2)
    with pytest.raises(UserError, match="truncated"):
        files.check_file(tmp_db)
