"""A read-only or unwritable database folder, and a --db under a regular file: one line
each, nothing changed.

As root, chmod does not stop writes, so the folder is made immutable with ``chattr +i`` (root
cannot create files in it either: EPERM, exactly what a user meets in a folder they cannot write);
the file itself stays writable, so DuckDB opens it and fails only when it creates the WAL at
commit, the traceback of the issue. Where the file system has no immutable attribute (overlayfs),
a read-only tmpfs mount is used (EROFS); only where neither is allowed do these tests skip, and
the simulated-error tests in test_store_integrity.py still run."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import UserError
from engine.store.runlock import RunLock
from tests.test_scoring import CHOICES, make_run


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in folder.iterdir()
    }


def _populate(db: Path, csv: Path) -> None:
    make_run(
        db,
        [("m1", "q1", 0, "coupled", "A"), ("m2", "q1", 0, "coupled", "B")],
        [("q1", "A", CHOICES, "Capital?")],
    )
    assert main(["import", "comparisons", str(csv), "--name", "s1", "--db", str(db)]) == 0


@pytest.fixture
def frozen(tmp_path):
    """(db, csv) with the db's folder unwritable for the test's duration."""
    folder, csv = tmp_path / "data", tmp_path / "c.csv"
    folder.mkdir()
    csv.write_text("prompt_id,model_a,model_b,winner\np1,a,b,a\n")
    db = folder / "x.duckdb"
    _populate(db, csv)
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        try:
            yield db, csv
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        return
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True
    ).returncode:
        pytest.skip(
            "neither chattr +i nor a tmpfs mount is allowed here (simulated errors: test_store_integrity.py)"
        )
    try:
        _populate(mnt / "x.duckdb", csv)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield mnt / "x.duckdb", csv
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize(
    "argv",
    [
        ["import", "comparisons", "{csv}", "--name", "s2"],
        ["score", "--run", "r1", "--rule", "paper"],
        ["comparisons", "delete", "s1"],
    ],
    ids=["import", "score", "delete"],
)
def test_unwritable_folder_is_one_line_and_nothing_changes(frozen, argv, capsys):
    db, csv = frozen
    before = _digests(db.parent)
    assert main([a.replace("{csv}", str(csv)) for a in argv] + ["--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: database {db} cannot be opened for writing") and "read-only" in err, (
        err
    )
    assert _digests(db.parent) == before


def test_run_lock_in_unwritable_folder_is_one_line(frozen):
    db, _ = frozen
    before = _digests(db.parent)
    with pytest.raises(UserError, match="cannot be opened for writing") as info:
        with RunLock(db, "r1"):
            pass
    assert "\n" not in str(info.value)
    assert _digests(db.parent) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["import", "comparisons", "{csv}", "--name", "s2"],
        [
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
        ["export", "generations"],
        ["comparisons", "list"],
    ],
    ids=["import", "generate", "export", "list"],
)
def test_db_under_a_regular_file_is_one_line(tmp_path, argv, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    csv = tmp_path / "c.csv"
    csv.write_text("prompt_id,model_a,model_b,winner\np1,a,b,a\n")
    db = f / "x.duckdb"
    assert main([a.replace("{csv}", str(csv)) for a in argv] + ["--db", str(db)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert str(db) in err
    assert f.read_text() == "hello\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "c.csv",
        "notes.txt",
    ]
